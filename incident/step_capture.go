package incident

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// stepCapture (released): once no process but the agent holds the orphan
// (terminate's grace over: SIGKILL), write it out, unless the capture
// taken before release is still exact, and unpin it.
func (e *Engine) stepCapture(li *live) {
	if alive := e.alive(li); len(alive) > 0 {
		if li.wait.why == WaitGrace && !e.d.Now().Before(li.wait.until) {
			for _, ref := range alive {
				if err := e.d.Procs.Kill(ref); err == nil {
					e.log.Warn("holder did not exit within the grace period; killed", "event", EventHolderReleased,
						"incident", li.id, "pid", ref.Pid, "how", "kill-after-grace")
				}
			}
			li.wait = pending{why: WaitExit}
		} else if li.wait.why != WaitGrace {
			li.wait = pending{why: WaitExit}
		}
		return
	}
	if li.early.dir != "" && sameStamps(li.early.stamps, li.stamps()) {
		e.captured(li, li.early.dir)
		return
	}
	if len(li.pins) == 0 && li.snapshot == "" && li.staging == "" {
		if li.early.dir != "" {
			e.captured(li, li.early.dir)
			return
		}
		e.finish(li, failed, failStep("nothing pinned to capture: the orphan was gone before it could be pinned"))
		return
	}
	c, err := e.writeCapture(li, "final")
	if err != nil {
		e.retryLater(li, "capture failed; the orphan stays pinned and the capture is retried ("+captureHint(err)+")")
		return
	}
	e.captured(li, c.Dir)
	e.dropSuperseded(li, li.early.dir, c.Dir)
}

// stepRetry (needs_action): run again what failed. Entered from before
// release, it is the capture the holders stay frozen for, then the
// release; entered later, the final capture.
func (e *Engine) stepRetry(li *live) {
	if e.phaseOf(li) != beforeRelease {
		e.stepCapture(li)
		return
	}
	switch {
	case li.policy == PolicyHold:
		li.wait = pending{why: WaitHold}
	case e.frozenTooLong(li):
		e.resumeFrozen(li)
	case len(li.writers()) == 0:
		e.releasedNone(li)
	case e.captureEarly(li):
		e.signal(li, li.policy)
	}
}

// alive lists the writers that still exist (same pid, same start). A
// read-only holder may keep the orphan open for as long as it likes: it
// cannot change it, so the capture does not wait for it.
func (e *Engine) alive(li *live) []holders.ProcRef {
	var out []holders.ProcRef
	for _, h := range li.writers() {
		if e.d.Procs.Alive(h.ref) {
			out = append(out, h.ref)
		}
	}
	return out
}

// captured moves the incident to captured and unpins the orphan.
func (e *Engine) captured(li *live, dir string) {
	li.wait, li.capDir = pending{}, dir
	if !e.enter(li, captured, journal.Step{Name: journal.StepCaptureFinal, Detail: map[string]any{"path": dir}},
		func(inc *journal.Incident) { inc.Detail.CapturePath = dir }) {
		return // the pins stay until the journal says captured
	}
	e.settleForeign(li, dir)
	e.unpin(li)
	if li.snapshot != "" {
		_ = e.st.RemoveFile(li.snapshot) // through the directory's handle, never by name
		li.snapshot = ""
	}
}

// captureHint is what an operator can do about a failed capture: a
// directory that is not the one discovery recorded (swapped, or reached
// through a symlink) is not a matter of disk space.
func captureHint(err error) string {
	var over *recovery.BudgetError
	switch {
	case errors.As(err, &over):
		return "free space or raise capture.max_bytes"
	case errors.Is(err, store.ErrDirChanged) || errors.Is(err, store.ErrSymlinkInPath) || errors.Is(err, recovery.ErrUnsafeDir):
		return "the store's directory is not the one discovery recorded, or is reached through a symlink: nothing was written; put the directory back, or capture the pinned orphan by hand"
	}
	return "check the error; free space or raise capture.max_bytes if the disk is full"
}

// writeCapture writes one capture of the pinned orphan and journals it.
func (e *Engine) writeCapture(li *live, phase string) (recovery.Capture, error) {
	src := recovery.CaptureSource{}
	for _, p := range li.pins {
		switch p.role {
		case holders.RoleMain:
			src.Main = p.f
		case holders.RoleWAL:
			src.WAL = p.f
		case holders.RoleSHM:
			src.SHM = p.f
		}
	}
	if kindOf(li.kind).mainShared && li.snapshot != "" {
		src.Main, src.MainSnapshot = nil, li.snapshot
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Minute)
	defer cancel()
	req := func() recovery.CaptureRequest {
		r := e.captureRequest(li)
		if phase == "final" && li.early.dir != "" {
			// The final capture replaces the one taken before release:
			// on a small disk the two at once were over the default
			// budget, and the incident waited for space for good (seed
			// 2's full-disk profile, two incidents left unresolved).
			r.Supersedes = li.early.bytes
		}
		return r
	}
	c, err := e.d.Salvage.Capture(ctx, src, req())
	for spaceShort(err) && e.pruneOneCapture(li) {
		c, err = e.d.Salvage.Capture(ctx, src, req())
	}
	var over *recovery.BudgetError
	if errors.As(err, &over) {
		e.d.Metrics.CaptureFailed()
		e.emit(slog.LevelError, "capture over budget; skipped", EventCaptureSkipped, li, "phase", phase,
			"need_bytes", over.Need, "budget_bytes", over.Budget, "free_bytes", over.Free, "configured", over.Configured,
			"err", err, "hint", "the orphan stays pinned and the capture is retried; free space or raise capture.max_bytes")
		return c, err
	}
	if err != nil {
		e.d.Metrics.CaptureFailed()
		e.emit(slog.LevelError, "capture failed", EventCaptureFailed, li, "phase", phase, "err", err,
			"hint", "the orphan stays pinned and the capture is retried; "+captureHint(err))
		return c, err
	}
	e.d.Metrics.CaptureWritten(c.Bytes)
	e.emit(slog.LevelInfo, "capture written", EventCaptureWritten, li, "phase", phase, "path", c.Dir,
		"bytes", c.Bytes, "reflinked", c.Reflinked)
	e.record(li, journal.Step{Name: journal.StepCaptureWritten,
		Detail: map[string]any{"path": c.Dir, "bytes": c.Bytes, "reflinked": c.Reflinked, "phase": phase}},
		func(inc *journal.Incident) {
			inc.Detail.CapturePath, inc.Detail.CaptureBytes, inc.Detail.Error = c.Dir, c.Bytes, ""
		})
	return c, nil
}

// mainOrphaned reports whether the main the incident pinned is no longer
// the file at the store's path.
func (e *Engine) mainOrphaned(li *live) bool {
	p := li.pinOf(holders.RoleMain)
	if p == nil {
		return false
	}
	g, err := e.st.ReadGeneration()
	if err != nil && !errors.Is(err, store.ErrFileChanged) {
		return !g.Main.Exists
	}
	return !g.Main.Exists || g.Main.ID != p.id
}
