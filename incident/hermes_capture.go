package incident

import (
	"context"
	"log/slog"
	"time"

	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// Events of settling Hermes' own captures of an incident's orphan
// (recovery.SettleForeignCaptures, docs/design.md §7 step 5).
const (
	// EventCaptureDuplicateRemoved: a finished Hermes capture of the
	// orphan held only bytes the incident's capture holds; removed.
	EventCaptureDuplicateRemoved = "capture.duplicate_removed"
	// EventCapturePartialRemoved: a Hermes capture the freeze and the
	// release cut short (its .partial staging directory); removed.
	EventCapturePartialRemoved = "capture.partial_removed"
	// EventCaptureForeignKept: a Hermes capture of the orphan that holds
	// bytes the incident's lacks, or could not be read: kept, and named.
	EventCaptureForeignKept = "capture.foreign_kept"
)

// StepCaptureForeign is the journal step recording each one.
const StepCaptureForeign = "capture.foreign"

// ForeignSettler is the optional part of Salvage that settles Hermes'
// captures next to the incident's (Recovery has it).
type ForeignSettler interface {
	SettleForeign(context.Context, recovery.ForeignRequest) ([]recovery.ForeignCapture, error)
}

// SettleForeign runs recovery.SettleForeignCaptures as the directory's owner.
func (r Recovery) SettleForeign(ctx context.Context, req recovery.ForeignRequest) (out []recovery.ForeignCapture, err error) {
	req.Dir = r.Dir
	err = r.asOwner(func() (err error) { out, err = recovery.SettleForeignCaptures(ctx, req); return err })
	return out, err
}

// settleForeign keeps one capture per orphaned generation: once the
// incident's capture is final and its writers are gone, a Hermes capture
// of the same orphan that holds nothing more is removed, and one that
// holds more is kept and named, each journaled.
func (e *Engine) settleForeign(li *live, dir string) {
	s, ok := e.d.Salvage.(ForeignSettler)
	if !ok || dir == "" || e.st.Kind != store.Hermes {
		return
	}
	req := recovery.ForeignRequest{DBPath: e.st.Path, Capture: dir}
	for _, h := range li.writers() {
		req.Holders = append(req.Holders, h.ref.Pid)
	}
	req.Alive = func(pid int) bool {
		for _, h := range li.writers() {
			if h.ref.Pid == pid {
				return e.d.Procs.Alive(h.ref)
			}
		}
		return true
	}
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
	defer cancel()
	out, err := s.SettleForeign(ctx, req)
	if err != nil {
		e.log.Warn("could not settle Hermes' captures of the orphan; they are left as they are", "incident", li.id, "err", err)
	}
	for _, fc := range out {
		event, level := EventCaptureForeignKept, slog.LevelWarn
		switch fc.Outcome {
		case recovery.ForeignDuplicateRemoved:
			event, level = EventCaptureDuplicateRemoved, slog.LevelInfo
		case recovery.ForeignPartialRemoved:
			event, level = EventCapturePartialRemoved, slog.LevelInfo
		}
		e.emit(level, "Hermes' capture of the orphan settled", event, li, "path", fc.Path, "pid", fc.PID,
			"outcome", fc.Outcome, "why", fc.Why, "capture", dir)
		jctx, jcancel := e.journalCtx()
		_, jerr := e.d.Journal.AddStep(jctx, li.id, journal.Step{Name: StepCaptureForeign, Detail: map[string]any{
			"path": fc.Path, "pid": fc.PID, "outcome": fc.Outcome, "why": fc.Why, "capture": dir}})
		jcancel()
		if jerr != nil {
			e.log.Error("journal Hermes capture settlement failed", "incident", li.id, "err", jerr)
		}
	}
}
