package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// resume picks an incident up where a previous agent left it. Its holders
// are looked up again by pid and start time: one that still lives is
// re-pinned (it is still stopped if it was frozen: SIGSTOP outlives the
// agent) and released per policy; the orphan of one that is gone died
// with the previous agent's pins unless it was already captured.
func (w *worker) resume(inc journal.Incident) {
	li := &liveIncident{id: inc.ID, kind: inc.Kind, policy: Policy(inc.Policy), state: inc.State, openedAt: inc.OpenedAt,
		capDir: inc.Detail.CapturePath, replacedAt: inc.Detail.ReplacedAt}
	if len(inc.Detail.Quarantined) > 0 && inc.Detail.CapturePath == "" {
		// A mispaired store's sidecars were moved into a staging capture
		// that was never finished: the capture adopts them from there.
		if d := filepath.Dir(inc.Detail.Quarantined[0]); strings.HasSuffix(d, ".partial") && fileExists(d) {
			li.staging = d
		}
	}
	if li.policy == "" {
		li.policy = w.a.policies(w.st.Path).For(inc.Kind)
	}
	var pids []int
	for _, h := range inc.Detail.Holders {
		pids = append(pids, h.PID)
	}
	if w.st.Kind == store.Hermes {
		// Lines Hermes appended while no agent ran are not told apart
		// from old ones; from here on they are followed again.
		w.markHermesDiverts(li)
	}
	w.a.opts.Metrics.IncidentState(string(li.kind), string(li.state), 1)
	w.mu.Lock()
	w.live[li.id] = li
	w.mu.Unlock()
	if _, err := w.a.journal.AddStep(w.a.ctx, li.id, journal.Step{Name: journal.StepResumed, Detail: map[string]any{"state": string(inc.State)}}); err != nil {
		w.log.Error("journal step failed", "incident", li.id, "err", err)
	}
	w.log.Warn("resuming incident", "incident", li.id, "kind", string(li.kind), "state", string(li.state))
	if li.state.Rank() >= journal.StateCaptured.Rank() {
		return // advance runs the steps after the capture
	}
	sr, err := w.a.cache.Targeted(w.target, pids...)
	if err != nil {
		w.log.Error("targeted scan on resume failed", "incident", li.id, "err", err)
		return
	}
	for _, hr := range inc.Detail.Holders {
		ref := holders.ProcRef{Pid: hr.PID, StartTicks: hr.StartTicks}
		p := findPid(sr.Holders, hr.PID)
		if p == nil || p.StartTicks != hr.StartTicks {
			continue
		}
		li.holders = append(li.holders, liveHolder{ref: ref, exe: p.Exe, files: p.Files})
	}
	if len(li.holders) == 0 {
		if li.capDir != "" {
			// The capture taken before release is all that is left.
			w.captured(li, li.capDir)
			return
		}
		w.finish(li, journal.StateFailed, journal.Step{Name: journal.StepFailed, Detail: map[string]any{
			"error": "every orphan holder exited while no agent pinned the orphan; nothing left to capture"}})
		return
	}
	w.pinAll(li)
	if li.kind == journal.KindSidecarLost {
		if snap := snapshotPath(w.st.Path, li.id); fileExists(snap) {
			li.snapshot = snap
		} else if li.state.Rank() < journal.StateReleased.Rank() {
			w.snapshotMain(li)
		}
	}
	preRelease := li.state.Rank() >= 0 && li.state.Rank() < journal.StateReleased.Rank()
	if li.state == journal.StateNeedsAction && inc.PrevState.Rank() >= 0 && inc.PrevState.Rank() < journal.StateReleased.Rank() {
		// The capture before release was still failing when the agent
		// stopped: the holders are still frozen; keep them so until it
		// succeeds (advance retries it), then release.
		if li.policy != PolicyHold {
			li.releaseAfter, li.retryAt = li.policy, time.Now()
		}
		return
	}
	switch {
	case preRelease:
		if li.kind == journal.KindMispaired && inc.Detail.Quarantined == nil {
			w.quarantine(li)
		}
		if li.policy != PolicyHold {
			w.release(li, li.policy)
		}
	default:
		// Released (or needs_action) before the restart: a terminate
		// already sent SIGTERM; give it one more grace period.
		if li.policy == PolicyTerminate {
			li.killAt = time.Now().Add(w.a.policies(w.st.Path).grace())
		}
		for _, h := range li.holders {
			w.watchExit(h.ref)
		}
	}
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
