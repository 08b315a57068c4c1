package incident

import (
	"fmt"
	"log/slog"

	"github.com/stateguard/stateguard/journal"
)

// EventIncidentParked: a step of the incident was under way when two
// agents in a row died (a crash, the service manager's watchdog); it is
// not run again until an operator releases the incident (error level).
const EventIncidentParked = "incident.parked"

// maxStepStarts is how many agents may start one step and die in it: the
// next one parks the incident instead. One death is an accident worth a
// retry (the OOM killer, a reboot); a second in the same step is the step.
const maxStepStarts = 2

// counted reports whether li's step is counted: the captures, which run
// on the store's worker for as long as the files take (a capture that
// never finished kept the watchdog restarting agentd into it, in a loop).
// The other steps are short, or (the divert) run on their own goroutine
// under the engine's context. A released incident whose writers still
// live only waits for them, at every wake of the worker: not journaled.
func (e *Engine) counted(li *live) bool {
	switch li.state {
	case pinned, needsAction:
		return true
	case released:
		return len(e.alive(li)) == 0
	}
	return false
}

// beginStep journals that li's step starts and reports whether it may:
// false when agents died in it maxStepStarts times, and li is parked now.
func (e *Engine) beginStep(li *live) bool {
	if li.parked != "" {
		return false
	}
	if !e.counted(li) {
		return true
	}
	run := journal.StepRun{State: li.state, Starts: 1}
	if li.run != nil && li.run.State == li.state {
		run.Starts = li.run.Starts + 1
	}
	if run.Starts > maxStepStarts {
		e.park(li, fmt.Sprintf("the %s step was under way when %d agents in a row died (a crash or the watchdog); not run again", li.state, run.Starts-1))
		return false
	}
	li.run = &run
	e.setStepRun(li)
	return true
}

// endStep journals that the step came back.
func (e *Engine) endStep(li *live) {
	if li.run == nil {
		return
	}
	li.run = nil
	e.setStepRun(li)
}

func (e *Engine) setStepRun(li *live) {
	ctx, cancel := e.journalCtx()
	defer cancel()
	if err := e.d.Journal.SetStepRun(ctx, li.id, li.run); err != nil {
		e.log.Error("journal the step under way", "incident", li.id, "err", err)
	}
}

// park stops running li's steps, says so and why, and resumes any holder
// it keeps frozen: the step that would release them is the one not run.
// The orphan stays pinned by whatever holds it.
func (e *Engine) park(li *live, why string) {
	li.parked, li.wait = why, pending{why: WaitHold}
	e.record(li, journal.Step{Name: journal.StepNote, Detail: map[string]any{"error": "parked: " + why}},
		func(inc *journal.Incident) { inc.Detail.Parked, inc.Detail.Error = why, "parked: "+why })
	var resumed []int
	for i := range li.holders {
		if h := &li.holders[i]; h.frozen && !h.readOnly {
			if err := e.d.Procs.Thaw(h.ref); err == nil {
				h.frozen = false
				resumed = append(resumed, h.ref.Pid)
			}
		}
	}
	e.emit(slog.LevelError, "incident parked", EventIncidentParked, li, "state", string(li.state), "reason", why,
		"resumed", resumed, "hint", "look at the agent's log for the crash in that step; `agentctl release` runs it again")
}
