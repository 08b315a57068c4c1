package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// prepare does what must happen while the orphan holders are still
// frozen, before they are released:
//   - sidecar_lost: snapshot the shared main as it is now, under a read
//     transaction on the new generation so no checkpoint lands in it
//     first; the orphan WAL was built on these pages.
//   - mispaired: move the old generation's -wal/-shm out of the path
//     before a new opener recovers them into the new main.
func (w *worker) prepare(li *liveIncident) {
	switch li.kind {
	case journal.KindSidecarLost:
		w.snapshotMain(li)
	case journal.KindMispaired:
		w.quarantine(li)
	}
}

func (w *worker) pinOf(li *liveIncident, role holders.Role) *pin {
	for _, p := range li.pins {
		if p.role == role {
			return p
		}
	}
	return nil
}

// snapshotPath is where a sidecar_lost incident keeps its main snapshot
// until the capture adopts it; resume finds it there.
func snapshotPath(db, incident string) string { return fmt.Sprintf("%s.snapshot-%s", db, incident) }

func (w *worker) snapshotMain(li *liveIncident) {
	main := w.pinOf(li, holders.RoleMain)
	if main == nil {
		w.log.Error("sidecar_lost without a pinned main; the capture will use the live main", "incident", li.id)
		return
	}
	dst := snapshotPath(w.st.Path, li.id)
	ctx, cancel := context.WithTimeout(w.a.ctx, time.Minute)
	defer cancel()
	end, err := store.BeginRead(ctx, w.st.Path)
	if err != nil {
		w.log.Warn("no read transaction on the new generation; snapshotting anyway", "incident", li.id, "err", err)
	}
	err = recovery.SnapshotMain(ctx, w.st.Path, main.f, dst)
	if end != nil {
		end()
	}
	if err != nil {
		w.log.Error("main snapshot failed", "event", EventCaptureFailed, "incident", li.id, "err", err)
		return
	}
	li.snapshot = dst
	if _, err := w.a.journal.AddStep(w.a.ctx, li.id, journal.Step{Name: "snapshot.written", Detail: map[string]any{"path": dst}}); err != nil {
		w.log.Error("journal step failed", "incident", li.id, "err", err)
	}
}

// quarantine moves a mispaired store's foreign sidecars into the
// incident's staging capture, unless a new opener already joined them.
func (w *worker) quarantine(li *liveIncident) {
	want := map[string]fileid.ID{}
	for _, p := range li.pins {
		switch p.role {
		case holders.RoleWAL:
			want["-wal"] = p.id
		case holders.RoleSHM:
			want["-shm"] = p.id
		}
	}
	if joined := w.joiners(li); len(joined) > 0 {
		msg := fmt.Sprintf("a new opener (pids %v) already joined the old generation's sidecars with the new main; files left in place, check the store by hand", joined)
		w.log.Error("mispaired sidecars already in use", "event", EventCaptureFailed, "incident", li.id, "pids", joined, "critical", true)
		w.note(li, msg)
		return
	}
	staging, err := recovery.StageCapture(w.captureRequest(li))
	if err != nil {
		w.log.Error("stage capture failed", "event", EventCaptureFailed, "incident", li.id, "err", err)
		w.note(li, err.Error())
		return
	}
	li.staging = staging
	moved, err := recovery.QuarantineSidecars(w.st.Path, staging, want)
	if err != nil {
		w.log.Error("quarantine incomplete", "event", EventCaptureFailed, "incident", li.id, "moved", moved, "err", err)
		w.note(li, err.Error())
	}
	if len(moved) > 0 {
		w.log.Warn("foreign sidecars quarantined", "event", EventSidecarsQuarantined, "incident", li.id, "moved", moved)
		if _, err := w.a.journal.UpdateIncident(w.a.ctx, li.id, journal.Step{Name: "sidecars.quarantined", Detail: map[string]any{"moved": moved}},
			func(inc *journal.Incident) error { inc.Detail.Quarantined = moved; return nil }); err != nil {
			w.log.Error("journal step failed", "incident", li.id, "err", err)
		}
	}
}

// joiners lists processes outside the incident that hold the current
// -wal or -shm: they opened the new main with the old sidecars.
func (w *worker) joiners(li *liveIncident) []int {
	sr, err := w.a.cache.Targeted(w.target)
	if err != nil {
		return nil
	}
	var out []int
	for _, p := range sr.Holders {
		if w.ownedBy(li, p.Ref()) {
			continue
		}
		for _, f := range p.Files {
			if f.Role != holders.RoleMain && f.Current {
				out = append(out, p.Pid)
				break
			}
		}
	}
	return out
}

func (w *worker) ownedBy(li *liveIncident, ref holders.ProcRef) bool {
	for _, h := range li.holders {
		if h.ref == ref {
			return true
		}
	}
	return false
}

func (w *worker) note(li *liveIncident, msg string) {
	if _, err := w.a.journal.UpdateIncident(w.a.ctx, li.id, journal.Step{Name: "note", Detail: map[string]any{"error": msg}},
		func(inc *journal.Incident) error { inc.Detail.Error = msg; return nil }); err != nil {
		w.log.Error("journal step failed", "incident", li.id, "err", err)
	}
}

func (w *worker) captureRequest(li *liveIncident) recovery.CaptureRequest {
	pid := os.Getpid()
	if len(li.holders) > 0 {
		pid = li.holders[0].ref.Pid
	}
	return recovery.CaptureRequest{
		DBPath: w.st.Path, PID: pid, IncidentID: li.id, Kind: string(li.kind),
		MaxBytes: w.a.captureBudget(), Staging: li.staging, Now: li.openedAt, Logger: w.a.opts.Logger,
	}
}

// fileStamp is what a pinned file looked like: enough to tell whether the
// orphan changed between two captures.
type fileStamp struct {
	role  holders.Role
	size  int64
	mtime int64
}

func stampPins(li *liveIncident) []fileStamp {
	var out []fileStamp
	for _, p := range li.pins {
		if p.role == holders.RoleSHM || (p.role == holders.RoleMain && li.kind == journal.KindSidecarLost) {
			continue // -shm is rebuilt from the WAL; a sidecar_lost main is the live one
		}
		fi, err := p.f.Stat()
		if err != nil {
			return nil
		}
		out = append(out, fileStamp{role: p.role, size: fi.Size(), mtime: fi.ModTime().UnixNano()})
	}
	return out
}

func sameStamps(a, b []fileStamp) bool {
	if len(a) == 0 || len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// preCapture captures the orphan while every holder is stopped, before
// any is released. With kill the orphan cannot change after this, so it is
// the final capture; with terminate or resume a holder may still commit
// before it exits, and capture() writes a second one if it did.
//
// It reports false when the capture could not be written and the holders
// should stay frozen; true when it was written, or cannot be taken before
// release at all (a holder that is not stopped).
func (w *worker) preCapture(li *liveIncident) bool {
	ctx, cancel := context.WithTimeout(w.a.ctx, 2*time.Second)
	for _, h := range li.holders {
		if err := holders.WaitStopped(ctx, h.ref); err != nil && !errors.Is(err, holders.ErrProcessGone) {
			cancel()
			w.log.Warn("holder not stopped; no capture before release", "incident", li.id, "pid", h.ref.Pid, "err", err)
			return true
		}
	}
	cancel()
	if li.kind == journal.KindSidecarLost && li.snapshot == "" {
		if w.mainOrphaned(li) {
			// The shared main was itself replaced since: only the frozen
			// holders and our pin hold it, so it cannot change any more
			// and is captured as it is (a snapshot of the path would be
			// another store). If new-generation checkpoints landed in it
			// before that, the divert finds out and says so.
			w.log.Warn("sidecar_lost main replaced before its snapshot; capturing the pinned main", "incident", li.id)
		} else {
			// The orphan WAL was built on the main as it was at
			// detection; a capture of today's main with it can be
			// malformed.
			w.snapshotMain(li)
			if li.snapshot == "" {
				w.needsAction(li, "no snapshot of the main before release (disk full?); the holders stay frozen and it is retried")
				return false
			}
		}
	}
	c, ok := w.writeCapture(li, "pre-release")
	if !ok {
		w.needsAction(li, "capture failed before release (disk full or over capture.max_bytes); the holders stay frozen and it is retried")
		return false
	}
	li.capDir, li.capStamp = c.Dir, stampPins(li)
	li.staging = "" // consumed: the quarantined sidecars are in c.Dir now
	return true
}

// mainOrphaned reports whether the main the incident pinned is no longer
// the file at the store's path.
func (w *worker) mainOrphaned(li *liveIncident) bool {
	p := w.pinOf(li, holders.RoleMain)
	if p == nil {
		return false
	}
	g, err := store.ReadGeneration(w.st.Path)
	if err != nil && !errors.Is(err, store.ErrFileChanged) {
		return !g.Main.Exists
	}
	return !g.Main.Exists || g.Main.ID != p.id
}

// needsAction moves the incident to needs_action with the reason an
// operator reads in `agentctl incident show`.
func (w *worker) needsAction(li *liveIncident, msg string) {
	if li.state == journal.StateNeedsAction {
		return
	}
	if _, err := w.a.journal.UpdateIncident(w.a.ctx, li.id, journal.Step{Name: journal.StepNeedsAction, Detail: map[string]any{"error": msg}},
		func(inc *journal.Incident) error {
			inc.State = journal.StateNeedsAction
			inc.Detail.Error = msg
			return nil
		}); err != nil {
		w.log.Error("journal step failed", "incident", li.id, "err", err)
	}
	w.setState(li, journal.StateNeedsAction)
}

// writeCapture writes one capture of the pinned orphan and journals it.
func (w *worker) writeCapture(li *liveIncident, phase string) (recovery.Capture, bool) {
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
	if li.kind == journal.KindSidecarLost && li.snapshot != "" {
		src.Main, src.MainSnapshot = nil, li.snapshot
	}
	ctx, cancel := context.WithTimeout(w.a.ctx, 10*time.Minute)
	defer cancel()
	c, err := recovery.WriteCapture(ctx, src, w.captureRequest(li))
	if err != nil {
		w.a.opts.Metrics.CaptureFailed()
		w.log.Error("capture failed", "event", EventCaptureFailed, "incident", li.id, "phase", phase, "err", err,
			"hint", "the orphan stays pinned; free space or raise capture.max_bytes, the capture is retried")
		return c, false
	}
	w.a.opts.Metrics.CaptureWritten(c.Bytes)
	w.log.Info("capture written", "event", EventCaptureWritten, "incident", li.id, "phase", phase, "path", c.Dir, "bytes", c.Bytes, "reflinked", c.Reflinked)
	if _, err := w.a.journal.UpdateIncident(w.a.ctx, li.id, journal.Step{Name: journal.StepCaptureWritten,
		Detail: map[string]any{"path": c.Dir, "bytes": c.Bytes, "reflinked": c.Reflinked, "phase": phase}},
		func(inc *journal.Incident) error {
			inc.Detail.CapturePath, inc.Detail.CaptureBytes, inc.Detail.Error = c.Dir, c.Bytes, ""
			return nil
		}); err != nil {
		w.log.Error("journal step failed", "incident", li.id, "err", err)
	}
	return c, true
}

// capture writes the orphan generation out once no process but the agent
// holds it (unless the capture taken before release is still exact), then
// unpins it.
func (w *worker) capture(li *liveIncident) {
	if li.capDir != "" && sameStamps(li.capStamp, stampPins(li)) {
		w.captured(li, li.capDir)
		return
	}
	if len(li.pins) == 0 && li.snapshot == "" && li.staging == "" {
		if li.capDir != "" {
			w.captured(li, li.capDir)
			return
		}
		w.finish(li, journal.StateFailed, journal.Step{Name: journal.StepFailed, Detail: map[string]any{"error": "nothing pinned to capture: the orphan was gone before it could be pinned"}})
		return
	}
	c, ok := w.writeCapture(li, "final")
	if !ok {
		li.retryAt = time.Now().Add(captureRetry)
		w.needsAction(li, "capture failed; the orphan stays pinned and the capture is retried (free space or raise capture.max_bytes)")
		return
	}
	if li.capDir != "" {
		w.log.Info("capture taken before release superseded", "incident", li.id, "old", li.capDir, "new", c.Dir)
	}
	w.captured(li, c.Dir)
}

// captured moves the incident to captured and unpins the orphan.
func (w *worker) captured(li *liveIncident, dir string) {
	li.retryAt, li.capDir = time.Time{}, dir
	w.transition(li, journal.StateCaptured, journal.Step{Name: "capture.final", Detail: map[string]any{"path": dir}})
	w.closePins(li)
	if li.snapshot != "" {
		_ = os.Remove(li.snapshot)
		li.snapshot = ""
	}
	w.afterCapture(li)
}
