package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stateguard/stateguard/fileid"
)

// The agent's own checkpoints (a replay's close, the idle store's) write
// old-generation pages into the main just as a writer's would. While a
// process that is no connection of the store has the main open for
// writing (cp, rsync --inplace), or its rewrite waits for its incident,
// those pages would land in the tool's new content and corrupt it: the
// worker refuses them then, and the rewrite gate waits for one in flight
// before it lets the tool's open through.

// BeginCheckpoint is the store.CheckpointGate of w's store: ok false
// while a foreign open or write of the main is held or being handled.
//
// A replay's checkpoint is refused too when the store's files at their
// paths are no longer the ones the replay started on: a main renamed
// over next to the old -wal (mispaired) would take the old generation's
// frames.
func (w *worker) BeginCheckpoint() (end func(), ok bool) {
	w.replayMu.Lock()
	fam := w.replayFam
	w.replayMu.Unlock()
	if fam != nil && !samePairing(w.readGeneration().IDs(), *fam) {
		return nil, false
	}
	w.rws.mu.Lock()
	defer w.rws.mu.Unlock()
	if w.rws.holding > 0 || len(w.rws.gated) > 0 || len(w.rws.active) > 0 || len(w.rws.pending) > 0 || w.rws.ownCkpt != nil {
		return nil, false
	}
	ch := make(chan struct{})
	w.rws.ownCkpt = ch
	return func() {
		w.rws.mu.Lock()
		w.rws.ownCkpt = nil
		w.rws.mu.Unlock()
		close(ch)
	}, true
}

// holdOwnCheckpoints refuses the agent's checkpoints of w's store until
// unhold is called, and returns the end of the one in flight (nil: none).
// A held open or a pending rewrite keeps refusing them after unhold.
//
// The hold is counted before the running replay is yielded: a replay that
// registers after the yield (its journal claim was still returning) then
// finds it in replayMayStart and waits, instead of running beside the
// foreign write.
func (w *worker) holdOwnCheckpoints() (inflight <-chan struct{}, unhold func()) {
	w.rws.mu.Lock()
	w.rws.holding++
	if w.rws.ownCkpt != nil {
		inflight = w.rws.ownCkpt
	}
	w.rws.mu.Unlock()
	w.yieldReplay("a process that is no connection of the store writes its main")
	return inflight, func() {
		w.rws.mu.Lock()
		w.rws.holding--
		w.rws.mu.Unlock()
	}
}

// errYielded is a replay's cause when the worker cut it short for a
// change of its store (yieldReplay).
var errYielded = errors.New("the store changed under the replay")

// startReplay registers the replay about to run on w's worker: the
// returned ctx ends when yieldReplay is called, and done unregisters it.
func (w *worker) startReplay(parent context.Context) (ctx context.Context, done func()) {
	ctx, cancel := context.WithCancelCause(parent)
	w.replayMu.Lock()
	w.replayCancel = cancel
	w.replayMu.Unlock()
	return ctx, func() {
		w.replayMu.Lock()
		w.replayCancel, w.replayFam = nil, nil
		w.replayMu.Unlock()
		cancel(nil)
	}
}

// replayMayStart runs on the worker right before a replay opens the
// store: its files at their paths must be the ones the worker's last
// check judged (a main renamed over next to the old -wal, not yet
// classified, would pair the replay's connection with the old
// generation's frames). Their identities are what the replay's
// checkpoint is checked against (BeginCheckpoint).
//
// A foreign open or write of the main being looked into, held by the gate,
// or seen and not yet handed to an incident refuses it too: that open or
// write yielded the running replay, and one that registered after the
// yield would otherwise write beside the rewrite (and wait on a write lock
// a writer frozen for it holds).
func (w *worker) replayMayStart() error {
	if why := w.rewriteUnhandled(); why != "" {
		return fmt.Errorf("%w: %s", errYielded, why)
	}
	fam := w.readGeneration().IDs()
	if w.haveGen && !samePairing(fam, w.gen.IDs()) {
		w.kick(time.Now())
		return fmt.Errorf("%w: the store's files changed since its last check", errYielded)
	}
	w.replayMu.Lock()
	w.replayFam = &fam
	w.replayMu.Unlock()
	return nil
}

// rewriteUnhandled says what foreign open or write of the main is being
// looked into or waits for its incident ("" when none). The rewriters of
// open incidents do not count: those incidents' own replays run beside
// them.
func (w *worker) rewriteUnhandled() string {
	w.rws.mu.Lock()
	defer w.rws.mu.Unlock()
	switch {
	case w.rws.holding > 0:
		return "a write of its main by a process that is no connection of the store is being looked into"
	case len(w.rws.gated) > 0:
		return "a process that is no connection of the store has its main open for writing"
	case len(w.rws.pending) > 0:
		return "its main was rewritten in place and the incident is not open yet"
	}
	return ""
}

// checkFirst runs on the worker right before a replay: a check queued
// before the replay registered (startReplay) had its yieldReplay find no
// replay to end, and would wait behind the replay's whole busy budget.
// It runs that check now, and yields the replay when the check opened an
// incident (writers frozen on a lock the replay would wait for).
func (w *worker) checkFirst() error {
	var at time.Time
	select {
	case at = <-w.kickC:
	default:
		// The fast freeze stops writers before it queues its kick.
		w.earlyMu.Lock()
		owed := len(w.early) > 0
		w.earlyMu.Unlock()
		if !owed {
			return nil
		}
		at = time.Now()
	}
	busy := w.busy()
	w.check(at)
	w.advance()
	if !busy && w.busy() {
		return fmt.Errorf("%w: the check it ran first opened an incident", errYielded)
	}
	return nil
}

// yieldReplay ends the replay running on w's worker, if any: a foreign
// write of the main, or a freeze of its writers, is an incident the
// worker must open now, and a replay can hold the worker for its whole
// busy budget (30 s) while a frozen writer keeps the write lock. The job
// is retried once the store has no incident that blocks replay; what it
// committed stays (replay is idempotent).
func (w *worker) yieldReplay(why string) {
	w.replayMu.Lock()
	cancel := w.replayCancel
	w.replayMu.Unlock()
	if cancel != nil {
		cancel(fmt.Errorf("%w (%s)", errYielded, why))
	}
}

// samePairing reports whether the store's files now (cur) pair the main
// with the same -wal as was (a connection creating sidecars where there
// were none, the replay's own, changes nothing): the same main, and no
// -wal now or the same one.
func samePairing(cur, was fileid.Family) bool {
	return cur.Main == was.Main && (cur.WAL.IsZero() || cur.WAL == was.WAL || was.WAL.IsZero())
}
