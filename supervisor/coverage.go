package supervisor

import (
	"hash/maphash"
	"slices"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/store"
)

// Coverage: which stores a full scan must read at their paths again. The
// holder scan needs what is at every store's paths to tell a current file
// from an orphan; reading them (four stat calls a store) at every scan
// was most of an idle 10,000-store agent's CPU. A store whose directory
// is watched reports every change at its paths as an event; so a scan
// reads a store again only when
//
//   - an event came for it since the last read (statOwed, set by the
//     event loop before it kicks the worker, so the check's own scan
//     reads it);
//   - its directory is not watched (missing, out of watches, an error,
//     or no fsnotify at all);
//   - events may have been lost: a kernel queue overflow, a watcher
//     error, a full event buffer, or a reconcile an operator asked for
//     (owedAll);
//   - it is its turn in the audit: each reconcile reads 1/auditEvery of
//     the covered stores too, so a change that no event reported (a
//     kernel bug, a mount over the file) is still seen within auditEvery
//     reconciles, at a cost spread evenly over them.
//
// Every process is inspected at every full scan whatever the coverage:
// holders come and go without any event in the store's directory.
// Discovery at a reconcile follows the same rule (discoveryDue).

// auditEvery is the number of reconciles over which every covered store
// is read once (5 minutes at the default 10 s interval).
const auditEvery = 30

var auditSeed = maphash.MakeSeed()

// auditSlot is the reconcile (modulo auditEvery) at which a store is
// read although covered: spread by a hash of its path.
func auditSlot(path string) int64 {
	return int64(maphash.String(auditSeed, path) % auditEvery)
}

// coverage lists the targets of a full scan and those whose paths need
// not be read again. audit: this is a reconcile's scan, which also reads
// the stores whose audit slot has come.
// The targets are the agent's shared list (workerList), unchanged a
// buffer of the agent's: both are read only until the next scan, which
// scanMu (held) keeps from starting.
func (a *Agent) coverage(audit bool) ([]holders.Target, []bool) {
	ws, targets := a.workerList()
	all := a.statAll.Swap(false)
	var turn int64 = -1
	if audit {
		turn = a.audits.Add(1) % auditEvery
	}
	if cap(a.unchanged) < len(ws) {
		a.unchanged = make([]bool, len(ws))
	}
	unchanged := a.unchanged[:len(ws)]
	for i, w := range ws {
		// Cleared before the read, so an event after it owes another.
		owed := w.statOwed.Swap(false)
		unchanged[i] = !owed && !all && w.auditSlot != turn && a.watch != nil && a.watch.Watched(w.dir)
	}
	return targets, unchanged
}

// owedAll makes the next full scan read every store, and the next
// reconcile re-run discovery.
func (a *Agent) owedAll() {
	a.statAll.Store(true)
	a.discoverOwed.Store(true)
}

// discoveryDue reports whether a reconcile must re-run discovery, which
// lists every profile of every home (three stat calls a profile): when
// the homes found are not those of the last discovery (a user added), a
// home is not fully watched, events may have been lost (owedAll), or at
// the first reconcile of each audit round. Otherwise every profile
// appearing or going was an event, and the walker rediscovered then.
// walkMu is held.
func (a *Agent) discoveryDue() bool {
	owed := a.discoverOwed.Swap(false)
	if owed || a.walk.runs%auditEvery == 0 || a.watch == nil {
		return true
	}
	homes, _ := store.DiscoverHomes(a.opts.Discover)
	a.mu.Lock()
	same := a.watchesSet && slices.EqualFunc(a.homes, homes, func(x, y store.Home) bool { return x.Root == y.Root })
	a.mu.Unlock()
	if !same {
		return true
	}
	for _, h := range homes {
		if !a.watch.HomeWatched(h.Root) {
			return true
		}
	}
	return false
}
