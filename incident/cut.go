package incident

import (
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// The frame cut (docs/design.md §7, step 6): a replaced, mispaired or
// rewritten store's divert replays what the orphan committed after the
// replacement,
// decided by the orphan WAL's position when the agent saw the change.
// Detection reads it through the guard's fds on the old generation, the
// moment the change is seen (Opening.Cut); when the guard held nothing
// there, the pins give it, read while the holders are still frozen. An
// incident found at start (the change happened while no agent ran) is
// cut at the position the journal has from before the agent stopped,
// when the orphans' WAL is the one it names (foundLate); without one its
// divert falls back to the timestamps, with replaceMargin.
// A rewritten main's cut is read by the gate (as root with fanotify) at
// the tool's open, once the writers it froze are seen stopped
// (Opening.Cut); else at the pins: late when the writers were frozen only
// after the rewriter's first write, and its time then keeps replaceMargin
// (live.cutLate).

func cutKind(k journal.Kind) bool {
	return k == journal.KindReplaced || k == journal.KindMispaired || k == journal.KindRewritten
}

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
	li.cut, li.cutSource = &recovery.FrameCut{WALCut: c, At: li.cutTime()}, "pin"
	rec := cutRecord(li.cut, "pin")
	e.record(li, journal.Step{Name: journal.StepWALCut, Detail: map[string]any{"frame": c.Frame, "source": "pin"}},
		func(inc *journal.Incident) { inc.Detail.WALCut = rec })
	e.log.Log(e.ctx, slog.LevelDebug, "wal cut read at the pins", "incident", li.id, "cut", c.String())
}

// cutTime is the time half of a cut read at the pins: a row the orphan
// had committed by the cut is rolled back only if stamped by then. For a
// replacement it is the change itself (the frames after the cut were
// committed after it). For a rewritten main whose writers the gate froze
// on the tool's open, before it wrote a byte, it is the rewrite too: what
// they had committed by then is what the restore overwrote, however long
// the tool ran before its open (its start is no cut: rows committed since
// may already be checkpointed into the main the tool overwrites, and the
// rows' stamps precede their commits by an unknown delay). Without a
// gate the cut comes late and keeps replaceMargin.
func (li *live) cutTime() time.Time {
	if li.kind == journal.KindRewritten && li.cutLate {
		return li.replacedAt.Add(-replaceMargin)
	}
	return li.replacedAt
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

// foundLate sets what an incident found at start cuts by
// (Opening.FoundLate): the change happened after o.ChangedAfter. A
// rewritten main keeps its inode, so its ctime dates the last write, not
// the rewrite; a replaced main's ctime is the replacement's (and is
// later than ChangedAfter), so it stays.
func foundLate(li *live, o Opening) {
	if li.kind == journal.KindRewritten || li.replacedAt.Before(o.ChangedAfter) {
		li.replacedAt = o.ChangedAfter
	}
	li.cutLate = false // the cut is the journaled position, exact in frames
	li.cutWanted = o.Cut != nil && cutKind(li.kind)
}
