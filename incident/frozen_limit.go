package incident

import (
	"log/slog"
	"time"
)

// A capture that cannot be written before release (the disk full, the
// budget too small, the profile directory swapped) leaves the incident in
// needs_action with its holders frozen, retried every few seconds. SIGSTOP
// outlives the agent, so without a bound a user who makes her own capture
// fail keeps any process that holds her store stopped for good. Past the
// frozen limit the holders are resumed (SIGCONT, nothing else): they go
// on writing into the orphan, which stays pinned, and the final capture
// is taken once they exit, as for the resume policy.

// frozenTooLong reports whether li has kept a frozen writer stopped in
// needs_action for the frozen limit.
func (e *Engine) frozenTooLong(li *live) bool {
	if li.needsSince.IsZero() {
		li.needsSince = e.d.Now() // a journal from before the limit: count from now
	}
	if e.d.Now().Sub(li.needsSince) < e.policies().FrozenLimitOrDefault() {
		return false
	}
	for _, h := range li.writers() {
		if h.frozen {
			return true
		}
	}
	return false
}

// resumeFrozen resumes li's writers with an error event that says why,
// and moves it on as released by resume.
func (e *Engine) resumeFrozen(li *live) {
	limit := e.policies().FrozenLimitOrDefault()
	e.emit(slog.LevelError, "holders frozen in needs_action for the frozen limit; resumed, the orphan stays pinned", EventFrozenLimit, li,
		"holders", holderPids(li.writers()), "frozen_for", e.d.Now().Sub(li.needsSince).Round(time.Second).String(),
		"limit", limit.String(),
		"hint", "the orphan is captured once its writers exit; fix what the incident's error names, then `agentctl release` to end them sooner")
	e.signal(li, PolicyResume)
}
