package incident

import (
	"io"
	"log/slog"
	"os"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// The frame cut (docs/design.md §7, step 6): a replaced or mispaired
// store's divert replays what the orphan committed after the replacement,
// decided by the orphan WAL's position when the agent saw the change.
// Detection reads it through the guard's fds on the old generation, the
// moment the change is seen (Opening.Cut); when the guard held nothing
// there, the pins give it, read while the holders are still frozen. An
// incident found at start (the change happened while no agent ran) has
// no cut: its divert falls back to the timestamps, with replaceMargin.

func cutKind(k journal.Kind) bool { return k == journal.KindReplaced || k == journal.KindMispaired }

func cutRecord(c *recovery.FrameCut, source string) *journal.WALCutRecord {
	return &journal.WALCutRecord{Frame: c.Frame, Salt1: c.Salt1, Salt2: c.Salt2, At: c.At, Source: source}
}

func cutFromRecord(r *journal.WALCutRecord) *recovery.FrameCut {
	if r == nil {
		return nil
	}
	return &recovery.FrameCut{WALCut: store.WALCut{Frame: r.Frame, Salt1: r.Salt1, Salt2: r.Salt2}, At: r.At}
}

// cutFromPins reads the cut from the pinned orphan WAL and -shm of an
// incident the running agent saw happen and whose detection could not
// read it.
func (e *Engine) cutFromPins(li *live) {
	if li.cut != nil || !li.cutWanted || !cutKind(li.kind) {
		return
	}
	wal, shm := li.pinOf(holders.RoleWAL), li.pinOf(holders.RoleSHM)
	if wal == nil {
		return
	}
	var shmr io.ReaderAt // a nil *os.File would be a non-nil reader
	if shm != nil {
		shmr = shm.f
	}
	c, err := store.ReadWALCut(wal.f, shmr)
	if err != nil {
		e.log.Info("no wal position at the pins; the divert cuts by time", "incident", li.id, "err", err)
		li.cutWanted = false
		return
	}
	li.cut = &recovery.FrameCut{WALCut: c, At: li.replacedAt}
	rec := cutRecord(li.cut, "pin")
	e.record(li, journal.Step{Name: journal.StepWALCut, Detail: map[string]any{"frame": c.Frame, "source": "pin"}},
		func(inc *journal.Incident) { inc.Detail.WALCut = rec })
	e.log.Log(e.ctx, slog.LevelDebug, "wal cut read at the pins", "incident", li.id, "cut", c.String())
}

// checkpointHolder is a Procs that can keep an orphan from checkpointing.
type checkpointHolder interface {
	HoldCheckpoint(shm *os.File) error
}

// holdCheckpoint keeps the orphan of a replaced store from checkpointing
// its WAL into its main or restarting it once pinned: a terminate policy
// lets it run again, and a checkpoint past the cut (its autocheckpoint on
// one more commit) would leave the capture unable to show the store at
// the cut, sending the divert back to the timestamps.
func (e *Engine) holdCheckpoint(li *live, shm *os.File) {
	h, ok := e.d.Procs.(checkpointHolder)
	if !ok {
		return
	}
	if err := h.HoldCheckpoint(shm); err != nil {
		e.log.Warn("orphan checkpoints not held off", "incident", li.id, "err", err)
	}
}
