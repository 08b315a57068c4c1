package supervisor

import (
	"errors"
	"slices"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/store"
)

// lockFreezeAsync runs lockFreeze on its own goroutine, one at a time per
// store, when gen (the kicker's read) lacks a file the last check saw: it
// reads the host's lock table and inspects processes, which must delay
// neither the event loop that kicked nor the worker. The caller holds
// earlyMu and has seen the worker not closed: closeEarly, which sets
// that under the same lock, waits for the goroutine.
func (w *worker) lockFreezeAsync(gen store.Generation, trigger time.Time) {
	if len(w.goneSinceCheck(gen)) == 0 {
		return
	}
	w.lockAt.Store(trigger.UnixNano())
	if !w.lockPass.CompareAndSwap(false, true) {
		w.lockAgain.Store(true)
		return
	}
	w.lockWG.Add(1)
	go func() {
		defer w.lockWG.Done()
		defer w.lockPass.Store(false)
		for {
			w.lockFreeze(time.Unix(0, w.lockAt.Load()))
			if !w.lockAgain.Swap(false) {
				return
			}
		}
	}()
}

// lockFreeze is the fast freeze for a writer the holder cache does not
// know yet: one that opened the store since the last full scan, which the
// cache-only fast freeze cannot see, and that until the check's settle
// and full scan had found it ran on into the orphan (the long chaos runs:
// writers that opened a store about 100 ms before its sidecars were
// unlinked wrote 99 ms into them). Every SQLite connection holds a POSIX
// lock on its -shm and its main while it has them open, so the lock table
// names it in one read; a targeted scan of those pids puts them in the
// cache, and the fast freeze then judges them like any holder. Nothing is
// read unless the store's files the last check saw are gone from their
// paths.
func (w *worker) lockFreeze(trigger time.Time) {
	gen, read := w.readGenerationChecked()
	if !read {
		return
	}
	gone := w.goneSinceCheck(gen)
	if len(gone) == 0 {
		return
	}
	pids, err := holders.LockPids(gone)
	if err != nil {
		if !errors.Is(err, errors.ErrUnsupported) {
			w.log.Debug("no lock table for the fast freeze", "err", err)
		}
		return
	}
	if known, ok := w.a.cache.Known(w.target); ok {
		pids = slices.DeleteFunc(pids, func(pid int) bool { return findPid(known.Holders, pid) != nil })
	}
	if len(pids) == 0 {
		return
	}
	if _, err := w.a.cache.Targeted(w.target, pids...); err != nil {
		w.log.Debug("targeted scan for the fast freeze", "pids", pids, "err", err)
		return
	}
	w.earlyMu.Lock()
	if w.earlyClosed {
		w.earlyMu.Unlock()
		return
	}
	if w.early == nil {
		w.early = map[int]frozenProc{}
	}
	n := len(w.early)
	w.fastFreeze(gen, w.early, trigger)
	more := len(w.early) > n
	w.earlyMu.Unlock()
	if !more {
		return
	}
	w.log.Debug("the lock table named holders the cache did not know", "pids", pids)
	// Not kick: that would run this pass again. The check confirms or
	// thaws them, and must not wait behind a replay.
	w.yieldReplay("its writers were frozen")
	select {
	case w.kickC <- time.Now():
	default:
	}
	w.wakeUp()
}

// goneSinceCheck lists the files the last check saw at the store's paths
// that are at none of them in gen.
func (w *worker) goneSinceCheck(gen store.Generation) []fileid.ID {
	last := w.seen.Load()
	if last == nil {
		return nil
	}
	var gone []fileid.ID
	for _, id := range []fileid.ID{last.Main, last.WAL, last.SHM} {
		if id != (fileid.ID{}) && !isCurrent(gen, id) {
			gone = append(gone, id)
		}
	}
	return gone
}
