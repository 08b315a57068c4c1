package supervisor

import (
	"errors"
	"io/fs"
	"os"
	"time"

	"github.com/stateguard/stateguard/store"
)

// Pending stores: a discovered profile whose state.db does not exist yet
// (Hermes creates it on the profile's first run) gets a directory watch
// but no worker. The first event in its directory, or the walker's lstat
// at a reconcile (for a directory that could not be watched), starts its
// worker. An empty profile directory so costs a watch and a map entry,
// which is what lets a home flooded with empty directories start in
// seconds (issue 14, item 7).

// storePresent reports whether a store has a main file or a -wal at its
// path (anything but "does not exist" counts: the worker reports it).
func storePresent(s store.Store) bool {
	for _, p := range []string{s.Path, s.WALPath()} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			return true
		}
	}
	return false
}

// splitPresent sorts stores without a worker into those to start now
// (files present, or an incident to resume) and those to keep pending.
func (a *Agent) splitPresent(ss []store.Store) (start, pending []store.Store) {
	for _, s := range ss {
		a.mu.Lock()
		_, resume := a.resumes[s.Key()]
		a.mu.Unlock()
		if resume || storePresent(s) {
			start = append(start, s)
		} else {
			pending = append(pending, s)
		}
	}
	return start, pending
}

// addPending records stores that wait for their files; it reports
// whether any was not pending before (the watches must be re-pointed).
func (a *Agent) addPending(ss []store.Store) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		a.pending = map[string]store.Store{}
	}
	changed := false
	for _, s := range ss {
		if _, ok := a.pending[s.Key()]; !ok {
			changed = true
		}
		a.pending[s.Key()] = s // as discovered now: a re-created directory's identity
	}
	return changed
}

// prunePending drops pending stores discovery no longer finds, and
// reports whether it dropped any. a.mu is held.
func (a *Agent) prunePending(seen map[string]bool) bool {
	n := len(a.pending)
	for k := range a.pending {
		if !seen[k] {
			delete(a.pending, k)
		}
	}
	return len(a.pending) != n
}

// activatePresent takes the stores of ss whose files exist now out of
// pending and returns them, to be started.
func (a *Agent) activatePresent(ss []store.Store) []store.Store {
	var out []store.Store
	for _, s := range ss {
		if storePresent(s) && a.takePending(s.Key()) {
			out = append(out, s)
		}
	}
	return out
}

func (a *Agent) takePending(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.pending[key]; !ok {
		return false
	}
	delete(a.pending, key)
	return true
}

// activate starts the worker of a pending store an event named; false
// when key is not pending.
func (a *Agent) activate(key string, at time.Time) bool {
	a.mu.Lock()
	s, ok := a.pending[key]
	if ok {
		delete(a.pending, key)
	}
	a.mu.Unlock()
	if !ok {
		return false
	}
	a.addWorker(s).kick(at)
	a.log.Info("store discovered", "event", EventStoreDiscovered, "store", s.Path, "profile", s.Profile, "home", s.Home, "kind", s.Kind.String())
	return true
}

// pendingStores lists the stores waiting for their files.
// pendingUncovered lists the pending stores a reconcile must look at: those
// no event vouches for, by the coverage rule (coverage.go): a directory
// not watched, events that may have been lost, or the store's audit turn.
// Looking at every one each reconcile was two lstats a store: at 9,000
// empty profile directories (a flooded home) more than all the rest of
// the reconcile. walkMu is held.
func (a *Agent) pendingUncovered() []store.Store {
	all := a.statAll.Load() || a.watch == nil
	turn := a.walk.runs % auditEvery
	ps := a.pendingStores()
	out := ps[:0]
	for _, s := range ps {
		if all || auditSlot(s.Path) == turn || !a.watch.Watched(s.Dir()) {
			out = append(out, s)
		}
	}
	a.work.pendingStated.Add(int64(len(out)))
	return out
}

func (a *Agent) pendingStores() []store.Store {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]store.Store, 0, len(a.pending))
	for _, s := range a.pending {
		out = append(out, s)
	}
	return out
}

// EventDiscoveryFlood: a home holds more profile directories than
// discovery takes from one home; said once per home while it lasts.
const EventDiscoveryFlood = "discovery.flood"

// logProblems says each discovery problem once while it lasts, not at
// every reconcile; a flooded home is its own event.
func (a *Agent) logProblems(ps []store.Problem) {
	now := make(map[string]bool, len(ps))
	for _, p := range ps {
		key := p.Error()
		now[key] = true
		if a.problemsSaid[key] {
			continue
		}
		if errors.Is(p.Err, store.ErrTooManyProfiles) {
			a.log.Error("profile directory flood: only part of this home is watched", "event", EventDiscoveryFlood,
				"subsystem", "discovery", "path", p.Path, "err", p.Err, "hint", p.Hint)
			continue
		}
		a.log.Warn("store skipped", "subsystem", "discovery", "path", p.Path, "err", p.Err, "hint", p.Hint)
	}
	a.problemsSaid = now
}
