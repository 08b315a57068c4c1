package incident

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// captureRetry is how soon a capture that failed (disk full, over budget)
// is tried again; its holders stay frozen meanwhile if it was the capture
// before release.
const captureRetry = 5 * time.Second

// stepPin (open, frozen): the agent's own read-only fds on every inode of
// the store the orphan holders hold, current ones included (a
// sidecar_lost main is current and needs the lock; a mispaired store's
// sidecars are current until quarantined), with the guard's read locks,
// so no orphan can become the last closer that checkpoints and unlinks.
func (e *Engine) stepPin(li *live) {
	pinnedNow := e.pinAll(li)
	e.cutFromPins(li)
	if len(li.pins) > 0 {
		e.enter(li, pinned, journal.Step{Name: journal.StepPinned, Detail: map[string]any{"pins": pinnedNow}}, nil)
		return
	}
	e.stepRelease(li) // nothing could be pinned: the release decides in this state
}

// pinAll pins what li's holders hold and is not pinned yet, and returns
// what it pinned.
func (e *Engine) pinAll(li *live) []string {
	have := map[fileid.ID]bool{}
	for _, p := range li.pins {
		have[p.id] = true
	}
	var out []string
	for _, h := range li.holders {
		for _, f := range h.files {
			if have[f.ID] {
				continue
			}
			fd, err := e.d.Procs.Pin(h.ref.Pid, f)
			if err != nil {
				e.log.Warn("pin failed", "incident", li.id, "pid", h.ref.Pid, "role", string(f.Role), "err", err)
				continue
			}
			b := holders.FileBirth(fd)
			if f.Birth != 0 && b != 0 && b != f.Birth {
				// Same number, another file: the orphan was freed and its
				// number reused. Pinning it would make every holder of
				// that unrelated file look like the orphan's. That file
				// may be the store's -shm now (store.CloseSHM).
				if f.Role == holders.RoleSHM {
					store.CloseSHM(e.st.Path, fd)
				} else {
					fd.Close()
				}
				e.log.Warn("pin refused: the inode number now names a file born later", "incident", li.id, "pid", h.ref.Pid,
					"role", string(f.Role), "id", f.ID.String())
				continue
			}
			have[f.ID] = true
			e.pinned(li, &pin{role: f.Role, id: f.ID, f: fd, birth: b})
			if err := e.d.Procs.LockPin(f.Role, fd); err != nil {
				e.log.Warn("pin lock not taken", "incident", li.id, "role", string(f.Role), "err", err)
			}
			if f.Role == holders.RoleSHM && cutKind(li.kind) {
				e.holdCheckpoint(li, fd)
			}
			out = append(out, fmt.Sprintf("%s %s", f.Role, f.ID))
			e.emit(slog.LevelInfo, "orphan inode pinned", EventHolderPinned, li, "pid", h.ref.Pid,
				"role", string(f.Role), "id", f.ID.String(), "current", f.Current)
		}
	}
	return out
}

// stepRelease (pinned, and open/frozen when nothing could be pinned):
// prepare while the holders are frozen, capture before release, then
// release them per policy.
func (e *Engine) stepRelease(li *live) {
	if prep := kindOf(li.kind).prepare; prep != nil && !prep(e, li) {
		return
	}
	switch {
	case len(li.writers()) == 0:
		e.releasedNone(li)
	case li.policy == PolicyHold:
		li.wait = pending{why: WaitHold}
	case li.anyFrozen() && !e.captureEarly(li):
		// No capture yet (disk full, no main snapshot): released now, the
		// orphan would live only through the agent's pins, and an agent
		// crash would lose it. A stopped holder keeps its inodes alive
		// whatever happens to the agent, so it stays stopped until a
		// capture exists.
	default:
		e.signal(li, li.policy)
	}
}

// releasedNone moves an incident no process can write to released
// without signalling anyone: nobody held the orphan, or only read-only
// holders did, which keep running.
func (e *Engine) releasedNone(li *live) {
	reason := "no process held the orphan"
	if len(li.holders) > 0 {
		reason = "only read-only holders, never signalled"
	}
	e.enter(li, released, journal.Step{Name: journal.StepReleased,
		Detail: map[string]any{"how": "none", "reason": reason, "read_only": readerPids(li.holders)}}, nil)
}

// captureEarly captures the orphan while every holder is stopped, before
// any is released. With kill the orphan cannot change after this, so it
// is the final capture; with terminate or resume a holder may still commit
// before it exits, and the final capture is taken again if it did.
//
// It reports false when the capture could not be written and the holders
// must stay frozen (the incident then needs action and retries); true when
// it was written, or cannot be taken before release at all (a holder that
// is not stopped).
func (e *Engine) captureEarly(li *live) bool {
	if len(li.pins) == 0 && li.staging == "" {
		return true // nothing pinned, nothing to copy: the final capture step says so
	}
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
	for _, h := range li.writers() {
		if err := e.d.Procs.WaitStopped(ctx, h.ref); err != nil && !errors.Is(err, holders.ErrProcessGone) {
			cancel()
			e.log.Warn("holder not stopped; no capture before release", "incident", li.id, "pid", h.ref.Pid, "err", err)
			return true
		}
	}
	cancel()
	if kindOf(li.kind).mainShared && li.snapshot == "" {
		if e.mainOrphaned(li) {
			// The shared main was itself replaced since: only the frozen
			// holders and the pin hold it, so it cannot change any more and
			// is captured as it is (a snapshot of the path would be another
			// store). If new-generation checkpoints landed in it before
			// that, the divert finds out and says so.
			e.log.Warn("sidecar_lost main replaced before its snapshot; capturing the pinned main", "incident", li.id)
		} else if e.snapshotMain(li); li.snapshot == "" {
			e.retryLater(li, "no snapshot of the main before release (disk full?); the holders stay frozen and it is retried")
			return false
		}
	}
	c, err := e.writeCapture(li, "pre-release")
	if err != nil {
		e.retryLater(li, "capture failed before release; the holders stay frozen and it is retried ("+captureHint(err)+")")
		return false
	}
	li.early = capture{dir: c.Dir, stamps: li.stamps(), bytes: c.Bytes}
	li.staging = "" // consumed: the quarantined sidecars are in c.Dir now
	return true
}

// retryLater moves the incident to needs_action with msg and retries its
// step after captureRetry.
func (e *Engine) retryLater(li *live, msg string) {
	li.wait = pending{why: WaitRetry, until: e.d.Now().Add(captureRetry), tries: li.wait.tries + 1}
	e.needsAction(li, msg)
}

// signal applies policy to the incident's holders and moves it to
// released.
func (e *Engine) signal(li *live, policy Policy) {
	how := string(policy)
	for _, h := range li.writers() {
		var err error
		switch policy {
		case PolicyTerminate:
			if err = e.d.Procs.Terminate(h.ref); err == nil {
				err = e.d.Procs.Thaw(h.ref)
			}
		case PolicyKill:
			err = e.d.Procs.Kill(h.ref)
		case PolicyResume:
			err = e.d.Procs.Thaw(h.ref)
		case PolicyObserve, PolicyHold:
		}
		if err != nil && !errors.Is(err, holders.ErrProcessGone) {
			e.log.Error("release failed", "incident", li.id, "pid", h.ref.Pid, "how", how, "err", err)
			continue
		}
		e.emit(slog.LevelInfo, "holder released", EventHolderReleased, li, "pid", h.ref.Pid, "how", how)
		e.watchExit(h.ref)
	}
	li.wait = pending{why: WaitExit}
	if policy == PolicyTerminate {
		li.wait = pending{why: WaitGrace, until: e.d.Now().Add(e.policies().GraceOrDefault())}
	}
	if li.state == released {
		return
	}
	e.enter(li, released, journal.Step{Name: journal.StepReleased, Detail: map[string]any{"how": how}},
		func(inc *journal.Incident) {
			inc.Policy = how
			for i := range inc.Detail.Holders {
				if !inc.Detail.Holders[i].ReadOnly {
					inc.Detail.Holders[i].Released = how
				}
			}
		})
}

// Release is `agentctl release`: an operator's decision for a held
// incident (or a change of mind for any not yet captured).
func (e *Engine) Release(id string, policy Policy) error {
	e.mu.Lock()
	li := e.live[id]
	e.mu.Unlock()
	if li == nil {
		return fmt.Errorf("incident %s is not waiting on its holders", id)
	}
	if e.phaseOf(li) == afterCapture {
		return fmt.Errorf("incident %s is already %s", id, li.state)
	}
	li.policy, li.wait = policy, pending{}
	if li.parked != "" {
		li.parked, li.run = "", nil
		e.record(li, journal.Step{Name: journal.StepNote, Detail: map[string]any{"note": "unparked by the operator's release"}},
			func(inc *journal.Incident) { inc.Detail.Parked, inc.Detail.StepRun = "", nil })
	}
	e.signal(li, policy)
	return nil
}
