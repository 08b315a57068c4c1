package supervisor

import (
	"path/filepath"
	"slices"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/watcher"
)

// The agent's view of its stores: discovery, the watches, the full holder
// scan, and the event loop that kicks each store's worker (the reconcile
// walker is walker.go).

func (a *Agent) worker(key string) *worker {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.workers[key]
}

func (a *Agent) addWorker(s store.Store) *worker {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w := a.workers[s.Key()]; w != nil {
		return w
	}
	w := newWorker(a, s)
	if a.startPauses != nil {
		w.guard.pause, w.guard.loaded = a.startPauses[s.Key()], true
	}
	w.resumes = a.resumes[s.Key()]
	delete(a.resumes, s.Key())
	a.workers[s.Key()] = w
	a.shares.addStore(ownerOf(s.DirID), 1)
	a.wlist = nil
	if len(w.resumes) > 0 {
		// An unfinished incident goes on at once; any other store's
		// goroutine waits for its first kick or request.
		w.wakeUp()
	}
	return w
}

// refreshStores re-runs discovery, starts workers for new stores whose
// files exist (the others wait, watched, in pending: pending.go), retires
// workers of stores that went away (unless they have an incident to
// finish), and points the watcher at the result when it changed.
func (a *Agent) refreshStores() error {
	stores, problems := store.Discover(a.opts.Discover)
	homes, _ := store.DiscoverHomes(a.opts.Discover)
	a.mu.Lock()
	homesSame := a.watchesSet && slices.EqualFunc(a.homes, homes, func(x, y store.Home) bool { return x.Root == y.Root })
	a.problems, a.homes = problems, homes
	seen := make(map[string]bool, len(stores))
	var candidates []store.Store // not a worker (any more)
	var removed []*worker
	for _, s := range stores {
		seen[s.Key()] = true
		w, ok := a.workers[s.Key()]
		switch {
		case !ok:
			candidates = append(candidates, s)
		case w.st.DirID != s.DirID && !w.busy():
			// The directory was re-created: a new worker records the new
			// one. A busy worker keeps the directory its incident began
			// in, and its steps refuse the new one.
			removed = append(removed, w)
			delete(a.workers, s.Key())
			a.shares.addStore(ownerOf(w.st.DirID), -1)
			a.wlist = nil
			candidates = append(candidates, s)
		}
	}
	for k, w := range a.workers {
		if !seen[k] && !w.busy() {
			removed = append(removed, w)
			delete(a.workers, k)
			a.shares.addStore(ownerOf(w.st.DirID), -1)
			a.wlist = nil
		}
	}
	newPending := a.prunePending(seen)
	a.mu.Unlock()
	a.opts.Metrics.StoresWatched(len(stores))
	for _, w := range removed {
		w.stopAndWait()
		a.cache.Forget(w.target)
		a.opts.Metrics.ForgetStore(w.st.Path)
		a.log.Info("store removed", "event", EventStoreRemoved, "store", w.st.Path, "profile", w.st.Profile)
	}
	added, pend := a.splitPresent(candidates)
	newPending = a.addPending(pend) || newPending
	a.startAll(added)
	a.logProblems(problems)
	if homesSame && len(added) == 0 && len(removed) == 0 && !newPending {
		// Nothing to re-point: the watcher's own reconcile re-checks
		// (and retries) every watched directory.
		return nil
	}
	a.mu.Lock()
	a.watchesSet = true
	a.mu.Unlock()
	err := a.setWatches()
	// A store created between the lstat above and its directory's
	// watch sent no event: look once more now that it is watched.
	a.startAll(a.activatePresent(pend))
	return err
}

// startAll starts a worker for each store and gives it its first check.
// A start of many stores is said in one line, not one per store.
func (a *Agent) startAll(ss []store.Store) {
	now := time.Now()
	for _, s := range ss {
		if w := a.addWorker(s); !a.firstChecks {
			w.kick(now)
		}
		if len(ss) <= discoveredEach {
			a.log.Info("store discovered", "event", EventStoreDiscovered, "store", s.Path, "profile", s.Profile, "home", s.Home, "kind", s.Kind.String())
		}
	}
	if len(ss) > discoveredEach {
		a.log.Info("stores discovered", "event", EventStoreDiscovered, "stores", len(ss), "first", ss[0].Path, "last", ss[len(ss)-1].Path)
	}
}

// discoveredEach is how many stores found at once are logged one by one.
const discoveredEach = 20

func (a *Agent) setWatches() error {
	a.mu.Lock()
	targets := make([]watcher.Target, 0, len(a.workers)+len(a.pending))
	target := func(s store.Store) watcher.Target {
		base := filepath.Base(s.Path)
		return watcher.Target{Key: s.Key(), Dir: s.Dir(), Names: []string{base, base + "-wal", base + "-shm"}}
	}
	for _, w := range a.workers {
		targets = append(targets, target(w.st))
	}
	for _, s := range a.pending {
		targets = append(targets, target(s))
	}
	homes := make([]watcher.Home, 0, len(a.homes))
	for _, h := range a.homes {
		homes = append(homes, watcher.Home{Root: h.Root})
	}
	a.mu.Unlock()
	slices.SortFunc(targets, func(x, y watcher.Target) int {
		if x.Key < y.Key {
			return -1
		}
		if x.Key > y.Key {
			return 1
		}
		return 0
	})
	if err := a.watch.Set(targets, homes); err != nil {
		// A directory that cannot be watched is still reconciled.
		a.log.Warn("watch set incomplete", "subsystem", "watcher", "err", err)
	}
	return nil
}

// fullScan re-scans every process for every store and refreshes the
// holder cache; a scan that cannot see everything is logged.
func (a *Agent) fullScan() *holders.Result { return a.scanStores(false) }

// scanStores is a full scan. What is at a store's paths is read again
// only when no event vouches for it (coverage.go); audit adds the stores
// whose turn it is to be read anyway (the reconcile walker's scans).
func (a *Agent) scanStores(audit bool) *holders.Result {
	a.scanMu.Lock()
	defer a.scanMu.Unlock()
	targets, unchanged := a.coverage(audit)
	res, err := a.cache.ScanReusing(targets, unchanged)
	if err != nil {
		a.owedAll() // nothing was read: every store is read next time
		a.log.Error("holder scan failed", "event", EventScanUnknown, "err", err)
		return nil
	}
	a.work.stated.Add(int64(res.Stated))
	a.opts.Metrics.ObserveScan(res.Took)
	var unknown []*holders.StoreResult
	for i := range res.Stores {
		if res.Reused(i) {
			// The last full scan's result again: its holder counts
			// and verdict were recorded then.
			continue
		}
		a.work.rebuilt.Add(1)
		sr := &res.Stores[i]
		if a.opts.Metrics != nil {
			counts := map[HolderKey]int{}
			for _, p := range sr.Holders {
				for _, f := range p.Files {
					counts[HolderKey{Role: string(f.Role), Orphan: !f.Current}]++
				}
			}
			a.opts.Metrics.SetHolders(sr.Target.Path, counts)
		}
		// Said once when a store's scan becomes unknown, not every
		// reconcile: the condition (hidepid, a process we may not
		// inspect) is usually permanent until an operator acts.
		was, seen := a.verdicts[sr.Target.Path]
		if !seen || was != sr.Verdict {
			a.verdicts[sr.Target.Path] = sr.Verdict
		}
		if sr.Verdict == holders.VerdictUnknown && (!seen || was != holders.VerdictUnknown) {
			unknown = append(unknown, sr)
		}
	}
	a.logUnknown(unknown)
	return res
}

// logUnknown says once per scan which stores' verdicts became unknown:
// one blind process usually makes every store unknown at once, and one
// line per store made a 10,000-store start log 10,000 warnings.
func (a *Agent) logUnknown(srs []*holders.StoreResult) {
	if len(srs) == 0 {
		return
	}
	first := srs[0]
	args := []any{"event", EventScanUnknown, "stores", len(srs), "store", first.Target.Path, "blind", len(first.Blind)}
	if len(first.Blind) > 0 {
		args = append(args, "first_pid", first.Blind[0].Pid, "first_reason", first.Blind[0].Reason)
	}
	if len(srs) > 1 {
		const sample = 5
		paths := make([]string, 0, min(len(srs), sample))
		for _, sr := range srs[:min(len(srs), sample)] {
			paths = append(paths, sr.Target.Path)
		}
		args = append(args, "sample", paths, "hint", "agentctl status lists every store whose verdict is unknown")
	}
	a.log.Warn("holder scan cannot see every process that could open these stores; their verdict is unknown", args...)
}

// orphaning reports whether ev can orphan a generation: anything done to
// the main's name, or a sidecar removed or renamed. Sidecars created
// alone are a connection opening the store, the replay's own among them.
func orphaning(ev watcher.Event, main string) bool {
	if ev.Ops.Has(watcher.Remove) || ev.Ops.Has(watcher.Rename) || ev.Ops.Has(watcher.Dir) {
		return true
	}
	return slices.Contains(ev.Names, main)
}

// eventLoop turns watcher events into worker kicks.
func (a *Agent) eventLoop() {
	defer a.wg.Done()
	for {
		select {
		case <-a.quit:
			return
		case ev, ok := <-a.watch.Events():
			if !ok {
				return
			}
			switch ev.Kind {
			case watcher.StoreChanged:
				if w := a.worker(ev.Key); w != nil {
					w.statOwed.Store(true) // before the kick: its scan reads the paths
					w.kickEvent(ev.At)
					if orphaning(ev, filepath.Base(w.st.Path)) {
						// The check this kick asks for freezes what
						// the fast freeze could not: it must not wait
						// behind a replay on the worker (issue 18:
						// every freeze over 50 ms came 60-80 ms after
						// a replay.done). After the kick: a replay
						// this yield misses registered after it, and
						// runs the queued check first (checkFirst).
						w.yieldReplay("its files changed at their paths")
					}
				} else {
					a.activate(ev.Key, ev.At)
				}
			case watcher.HomeChanged:
				// Discovery lists a home's profiles: it runs on the
				// walker, never here, so a store's event is never
				// queued behind another home's flood of directories.
				select {
				case a.rediscoverC <- struct{}{}:
				default:
				}
			case watcher.Reconcile:
				if ev.Reason != watcher.ReasonTick {
					// Events may have been lost (overflow, an error, the
					// buffer full) or an operator asked: read every store.
					a.owedAll()
				}
				// A full scan takes milliseconds to tens of them;
				// it must never delay the next store event.
				select {
				case a.reconcileC <- struct{}{}:
				default:
				}
			case watcher.WatchError:
				a.log.Warn("directory not watched; only reconciles see it", "subsystem", "watcher", "path", ev.Path, "err", ev.Err)
			}
		}
	}
}
