package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// The guard's read lock stops every "last closer" checkpoint, so a store
// whose last connection closed keeps its committed rows in the -wal until
// someone checkpoints. The agent does it itself once the store is idle
// (checkpointIdle), and because an operator may delete a leftover -wal
// before that, the guard keeps the -wal's inode open too: a -wal unlinked
// with committed frames still in it is a sidecar_lost incident with no
// live holder (lostWAL), captured from the guard's own fds.

// EventGuardCheckpointed: the agent checkpointed an idle guarded store.
const EventGuardCheckpointed = "guard.checkpointed"

// checkpointIdle copies an idle guarded store's WAL into its main file.
// Idle means the last full scan saw no process on the store and the
// targeted one sr confirms it, with no incident in progress. The check is
// cheap when there is nothing to do: the wal-index says whether every
// committed frame was already backfilled. It runs on
// the worker, between steps, so no connection of the agent is open on the
// store meanwhile.
func (w *worker) checkpointIdle(gen store.Generation, sr *holders.StoreResult) {
	g := w.guard.g
	if g == nil || w.busy() {
		return
	}
	if (sr != nil && len(sr.Holders) > 0) || !w.a.scanSawNoHolder(w.st.Path) {
		// Held: the reconcile walker checks again until the last
		// holder is gone, even one that came and went between two
		// reconciles.
		w.recheck.Store(true)
		return
	}
	ids := gen.IDs()
	if ids.WAL.IsZero() || guardFiles(gen) != g.IDs() {
		return // only the generation the guard holds, so its fds vouch for the files
	}
	if bl, err := store.ReadWALBacklog(g.WAL(), g.SHM()); err == nil && !bl.Pending() {
		return
	}
	ctx, cancel := context.WithTimeout(w.a.ctx, time.Minute)
	defer cancel()
	// SQLite checkpoints by name: only in the directory discovery
	// recorded (checked through its handle first), and as its owner, so a
	// directory swapped in between reaches only what the owner could
	// write anyway.
	var cp store.Checkpoint
	h, err := w.st.OpenDir()
	if err == nil {
		h.Close()
		end, ok := w.BeginCheckpoint()
		if !ok {
			w.log.Debug("checkpoint of the idle store held: its main is open for writing by another process")
			w.recheck.Store(true)
			return
		}
		err = store.AsOwner(ownerOf(w.st.DirID), ownerGroup(w.st.DirID), func() (err error) {
			cp, err = w.st.CheckpointIdle(ctx, ids)
			return err
		})
		end()
	}
	if errors.Is(err, store.ErrNoSpaceToCheckpoint) {
		// Not a failure: the rows are safe in the WAL; said once per
		// WAL size, not at every check of a full disk.
		if w.noSpaceAt != ids.WAL {
			w.noSpaceAt = ids.WAL
			w.log.Warn("idle store not checkpointed: its filesystem is (nearly) full; retried at the next reconcile",
				"err", err, "hint", "free space on the store's filesystem")
		}
		w.recheck.Store(true)
		return
	}
	if err != nil {
		w.log.Warn("checkpoint of the idle store failed; retried at the next reconcile", "err", err)
		w.recheck.Store(true)
		return
	}
	if !cp.Done {
		w.log.Debug("checkpoint of the idle store incomplete; retried at the next reconcile", "frames", cp.Frames, "backfilled", cp.Backfilled)
		w.recheck.Store(true)
		return
	}
	w.log.Info("idle store checkpointed: its committed rows are in the main file", "event", EventGuardCheckpointed)
}

// scanSawNoHolder reports whether the last full scan saw no process
// (other than the agent) on the store. A process the scan could not
// inspect does not count: a checkpoint that never waits is safe beside
// any connection, and idleness only spares live writers the extra I/O.
func (a *Agent) scanSawNoHolder(path string) bool {
	last := a.cache.Last()
	if last == nil {
		return false
	}
	sr := last.Store(path)
	return sr != nil && len(sr.Holders) == 0
}

// lostWAL opens a sidecar_lost incident for a -wal that was unlinked or
// replaced under nobody while it still held committed frames that are not
// in the main file (an operator deleting "leftover" sidecars of an idle
// store, or a race with checkpointIdle). The guard's fds keep the orphan
// alive; they are duplicated into the incident's pins, which the capture
// reads. An empty or fully checkpointed -wal is a plain generation change,
// and so is one that was moved, not unlinked.
func (w *worker) lostWAL(ch store.Change, old, gen store.Generation, at time.Time) {
	if !ch.Has(store.WALRemoved) && !ch.Has(store.WALReplaced) {
		return
	}
	if ch.Has(store.MainReplaced) || ch.Has(store.MainRemoved) || ch.Has(store.MainCreated) {
		return // a restore: rows before it are rolled back on purpose
	}
	g := w.guard.g
	if g == nil || g.WAL() == nil || g.IDs().WAL != old.WAL.ID || g.IDs().Main != gen.Main.ID {
		return
	}
	if w.guard.claimedWAL == g.IDs().WAL {
		return // a live writer's orphan: its incident has it
	}
	// Only a -wal no directory names any more is lost: one renamed away
	// (a mispaired incident's quarantine moves the replaced main's
	// sidecars into its capture) still exists, and is another incident's.
	if fi, err := g.WAL().Stat(); err != nil || !fileid.Supported || fileid.Of(fi).Nlink != 0 {
		return
	}
	w.openLostWAL(g, generationRecord(old), gen, at)
}

// openLostWAL opens a sidecar_lost incident for the unlinked -wal g holds,
// when it holds committed frames that are not in the main file.
func (w *worker) openLostWAL(g *holders.Guard, old *journal.GenerationRecord, gen store.Generation, at time.Time) {
	bl, err := store.ReadWALBacklog(g.WAL(), g.SHM())
	if err != nil {
		w.log.Warn("cannot read the unlinked -wal the guard holds; treating it as holding rows", "err", err)
	} else if !bl.Pending() {
		w.log.Debug("unlinked -wal held nothing that is not in the main file", "backlog", bl.String())
		return
	}
	dup, err := g.Dup()
	if err != nil {
		w.log.Error("cannot keep the unlinked -wal for a capture", "event", incident.EventCaptureFailed, "err", err)
		return
	}
	ids := g.IDs()
	w.log.Warn("a -wal holding committed rows was unlinked while no process had the store open",
		"backlog", fmt.Sprint(bl), "wal", ids.WAL.String())
	var pins []incident.Pin
	for _, p := range []incident.Pin{{Role: holders.RoleMain, ID: ids.Main, File: dup.Main},
		{Role: holders.RoleWAL, ID: ids.WAL, File: dup.WAL}, {Role: holders.RoleSHM, ID: ids.SHM, File: dup.SHM}} {
		if p.File != nil {
			pins = append(pins, p)
		}
	}
	w.engine().Open(incident.Opening{Kind: journal.KindSidecarLost, Policy: incident.PolicyObserve, At: at,
		Old: old, New: generationRecord(gen), Pins: pins})
	if w.guard.g == g {
		w.guard.claimedWAL = ids.WAL // its re-arm must not keep it for a second incident
	}
}

// claimGuardWAL marks the guard's -wal as the orphan of the incident
// about to open when one of its holders holds it: the guard keeps that
// inode open until it re-arms, and the next change must not take it for
// a -wal unlinked under nobody and capture the same rows again.
func (w *worker) claimGuardWAL(orphans []holders.Process) {
	g := w.guard.g
	if g == nil || g.WAL() == nil {
		return
	}
	for _, p := range orphans {
		for _, f := range p.Files {
			if f.ID == g.IDs().WAL {
				w.guard.claimedWAL = f.ID
				return
			}
		}
	}
}
