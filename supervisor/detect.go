package supervisor

import (
	"errors"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// check compares what is at the store's paths with what the worker last
// saw and with the processes holding the store's inodes. Any process that
// holds an inode no longer at its path is an orphan holder: it is frozen
// first (from the holder cache, before anything else is read), and an
// incident is opened for it.
func (w *worker) check(at time.Time) {
	seenAt := w.takeEventAt()
	w.lookWhileDown()
	w.openRewrites(nil)
	gen, genAt := w.readGen()
	if w.haveGen && gen.Diff(w.gen).Same() {
		w.unchangedAt = genAt
	}
	if !w.haveGen || gen.Main.ID == w.gen.Main.ID {
		// A main that is new at the path is a generation change, which
		// this check classifies (mispaired, replaced) before it is
		// watched: what writes it meanwhile (tar -x, cp after a mv
		// aside) fills a file no live WAL is paired with yet.
		w.watchMain(gen.Main)
	}
	w.checked = true
	w.rws.mainSize.Store(gen.Main.Size)
	frozen := map[int]frozenProc{}
	w.takeEarly(frozen)
	trigger := at // what set the check off; its first store event if any
	if !seenAt.IsZero() {
		trigger = seenAt
	}
	w.fastFreeze(gen, frozen, w.changeSeen(trigger))
	cut := w.walCut(gen)
	changed := w.haveGen && !gen.Diff(w.gen).Same()
	if len(frozen) > 0 || changed {
		w.armOnOpen(gen)
		// A restore is several syscalls (rename the main, then unlink
		// the sidecars, often from separate commands): classify what
		// it leaves, not the instant between two of its steps. The
		// orphans are already stopped, so waiting costs no data.
		gen, genAt = w.settle(frozen)
		changed = w.haveGen && !gen.Diff(w.gen).Same()
		w.armOnOpen(gen) // the -shm comes just after the -wal
		if cut == nil {
			cut = w.walCut(gen)
		}
	}
	if changed {
		at = w.changeAt(at, seenAt)
	}
	sr, ok := w.scan(gen, changed, frozen)
	if !ok {
		return
	}
	// A rewrite seen while this check settled began what it sees (cp,
	// then rm of the sidecars): its incident takes the writers first.
	w.openRewrites(frozen)
	orphans := w.confirm(sr, frozen)
	orphans, kind, policy := w.freezeOrphans(orphans, frozen)
	old, hadGen := w.gen, w.haveGen
	if changed {
		w.generationChanged(old, gen, sr, len(orphans) > 0, at)
	}
	w.adoptGeneration(gen, genAt)
	defer w.notePosition()                      // last: what the check leaves at the path
	defer w.adoptLostWALs(sr, orphans, gen, at) // after the guard is synced and what it kept is known
	defer w.checkpointIdle(gen, sr)             // after the guard is synced: deferred calls run last first
	defer w.guardSync(gen)
	if len(orphans) > 0 {
		var oldRec *journal.GenerationRecord
		if hadGen {
			oldRec = generationRecord(old)
		}
		w.openIncident(orphans, kind, policy, frozen, at, seenAt, oldRec, gen, cut)
	}
}

// changeAt dates a generation change the check saw. Both the kick that
// set the check off (at) and the first event at the store's paths since
// the last check (seenAt) came no later than the change's own event, so
// the later of them is the closer bound. Either can be stale: a kick
// queued while the worker was busy for seconds (a divert) keeps its time,
// and dating the change there replayed back rows the orphan committed
// before the rename; the watcher can hand an event on with the time its
// burst began.
func (w *worker) changeAt(at, seenAt time.Time) time.Time {
	if seenAt.After(at) {
		at = seenAt
	}
	return w.changeSeen(at)
}

// generationChanged logs a change from old to gen and, when no orphan
// holder explains it, looks at what the change left behind: sidecars of
// another generation next to the main, an unlinked -wal the guard kept.
func (w *worker) generationChanged(old, gen store.Generation, sr *holders.StoreResult, orphaned bool, at time.Time) {
	ch := gen.Diff(old)
	w.log.Info("generation changed", "event", EventGenerationChanged, "change", ch.String(),
		"main", gen.Main.ID, "wal", gen.WAL.ID, "shm", gen.SHM.ID, "intended", w.intended())
	if !orphaned {
		w.checkForeignSidecars(ch, old, gen, sr, at)
		w.lostWAL(ch, old, gen, at)
	}
}

// adoptGeneration makes gen the one the worker last saw: what the next
// check compares with, the main fanotify watches, the identities the fast
// path's events are matched against.
func (w *worker) adoptGeneration(gen store.Generation, genAt time.Time) {
	w.gen, w.haveGen = gen, true
	w.unchangedAt = genAt
	w.watchMain(gen.Main)
	fam := gen.IDs()
	w.seen.Store(&fam)
	w.recheck.Store(false)
}

// armOnOpen arms the guard at once when gen is only a connection opening
// the store (sidecarsCreated), or only new sidecars next to the same main
// while the guard holds nothing (sidecarsNew): the settle and the full
// scan (which waits for any other store's or the reconcile walker's scan)
// can take longer than that connection lives, and the guard must hold the
// new -shm before the connection can be its last closer. The check's own
// guardSync after the scan finds it armed.
//
// The unguarded case is what a mispaired incident leaves: it moves the old
// sidecars into its capture inside the check that found it, so the worker
// last saw sidecars that are gone and the next opener's look "replaced",
// not created. With no guard, no old -wal is held for lostWAL to read and
// the sidecars' own check (foreign sidecars) is only for a replaced main:
// arming now is what the check would do after the scan, only sooner.
func (w *worker) armOnOpen(gen store.Generation) {
	if !w.haveGen {
		return
	}
	ch := gen.Diff(w.gen)
	if sidecarsCreated(ch) || (w.guard.g == nil && sidecarsNew(ch)) {
		w.guardSync(gen)
	}
}

// sidecarsCreated reports whether ch is only a connection creating the
// -wal and/or -shm next to the same main file: nothing to classify, so the
// guard arms before the check goes on. A replaced or removed sidecar is
// not: lostWAL reads the old -wal through the guard still holding it.
func sidecarsCreated(ch store.Change) bool {
	created := ch & (store.WALCreated | store.SHMCreated)
	return created != 0 && ch&^(store.WALCreated|store.SHMCreated|store.WALReset) == 0
}

// sidecarsNew reports whether ch is only a new -shm (and -wal) next to the
// same main file, created or in place of another.
func sidecarsNew(ch store.Change) bool {
	const news = store.WALCreated | store.SHMCreated | store.WALReplaced | store.SHMReplaced
	return ch&(store.SHMCreated|store.SHMReplaced) != 0 && ch&^(news|store.WALReset) == 0
}

// walCut reads, through the guard's fds on the generation the worker
// last saw, where its WAL stands now, when gen shows its main replaced:
// the frame cut of the incident about to open (incident/cut.go). It runs
// right after the fast freeze, so the orphans it covers are stopped.
func (w *worker) walCut(gen store.Generation) *store.WALCut {
	g := w.guard.g
	if g == nil || !w.haveGen || g.WAL() == nil || g.IDs() != guardFiles(w.gen) {
		return nil
	}
	if gen.Main.Exists && gen.Main.ID == w.gen.Main.ID {
		return nil // the main was not replaced
	}
	c, err := store.ReadWALCut(g.WAL(), g.SHM())
	if err != nil {
		w.log.Debug("no wal position for the cut", "err", err)
		return nil
	}
	return &c
}

// scan finds the store's holders: a full scan after a real change (the
// targeted scan re-inspects only the holders the cache knows, so a
// process that opened the store since the last full scan would be missed
// until the next reconcile; a real change is rare and worth it, and the
// known holders are already frozen), the targeted one when the fast path
// froze someone or the cache shows an orphan holder no incident handles,
// and otherwise the cache's last result. On failure every fast-path
// freeze is undone.
func (w *worker) scan(gen store.Generation, changed bool, frozen map[int]frozenProc) (*holders.StoreResult, bool) {
	if changed {
		// The check saw the change itself: its scan reads this store's
		// paths whatever the event loop said (coverage.go).
		w.statOwed.Store(true)
		if res := w.a.fullScan(); res != nil {
			if sr := res.Store(w.st.Path); sr != nil {
				return sr, true
			}
		}
	}
	if !changed && len(frozen) == 0 {
		// Nothing moved at the paths and nobody was frozen: what the
		// last scan saw stands (a reconcile's full scan has just run
		// before its checks). Re-inspecting the known holders read the
		// whole host lock table once per store, which with thousands of
		// guarded stores made each check cost more than all of them.
		//
		// Not when it lists a holder of an orphaned inode that no
		// incident handles: the cache is as old as the last scan, and
		// that holder may be gone since. An incident that wrote nothing
		// into the store (its frame cut left no row to replay) brings no
		// generation change and so no full scan before it ends: the
		// cache still lists the writer it killed, and taking that for a
		// new orphan opened an incident for a dead process, whose own
		// release woke this worker to open the next one. The targeted
		// scan looks at the listed pids again (a dead one drops out,
		// from the cache too).
		if known, ok := w.a.cache.Known(w.target); ok && !w.unhandledOrphan(&known, gen) {
			return &known, true
		}
	}
	pids := make([]int, 0, len(frozen))
	for pid := range frozen {
		pids = append(pids, pid)
	}
	sr, err := w.a.cache.Targeted(w.target, pids...)
	if err != nil {
		w.log.Error("targeted holder scan failed", "event", EventScanUnknown, "err", err)
		w.thawAll(frozen, "the confirming scan failed")
		return nil, false
	}
	return sr, true
}

// unhandledOrphan reports whether sr lists a holder of an inode not at
// its path in gen that no incident of the store owns.
func (w *worker) unhandledOrphan(sr *holders.StoreResult, gen store.Generation) bool {
	for i := range sr.Holders {
		if p := &sr.Holders[i]; holdsStale(p, gen) && !w.owns(p.Ref()) {
			return true
		}
	}
	return false
}

// confirm returns the scan's orphan holders that still hold an inode not
// at its path once the scan is over (orphansNow), that no incident of the
// store handles yet and that are not an announced restore's own process
// (it holds the old files on purpose; anyone else it orphans is still
// protected), and that is not SQLite's own last closer of the store.
// Whatever the fast path froze that the fresh scan does not confirm as a
// process that may write such an orphan goes back to running at once,
// with a holder.thawed event saying why.
func (w *worker) confirm(sr *holders.StoreResult, frozen map[int]frozenProc) []holders.Process {
	var orphans []holders.Process
	if cand := sr.Orphans(); len(cand) > 0 {
		// Read only when there is an orphan to judge: most checks have
		// none, and these are an lstat per file and an open.
		now := w.readGeneration()
		closer := closingPid(w.st, now)
		for _, p := range orphansNow(cand, now) {
			if !w.owns(p.Ref()) && !w.restorer(p.Ref()) && !isCloser(&p, now, closer) && (p.MayWrite() || holdsStaleData(&p, now)) && !exited(&p) && !forkCopy(&p) {
				orphans = append(orphans, p)
			}
		}
	}
	for pid, f := range frozen {
		if w.owns(f.ref) {
			w.stops.drop(f.ref) // an incident froze it too, and releases it
			delete(frozen, pid)
			continue
		}
		p := findPid(orphans, pid)
		var why string
		switch {
		case p == nil || p.StartTicks != f.ref.StartTicks:
			why = "the confirming scan shows it holding no orphaned inode"
		case !p.MayWrite():
			why = "it holds the orphan read-only"
		case !p.MaySignal():
			why = "it is another user's process: " + p.Foreign
		default:
			continue
		}
		w.thaw(pid, f, why)
		delete(frozen, pid)
	}
	return orphans
}

// thaw gives back the claim f (a stop this check, the early freeze or a
// rewrite's handling made) and says why; an empty why says nothing. The
// process is resumed only when no other claim holds it (the early freeze,
// a held open, a pending rewrite stopped it too) and no incident owns it
// (ledger.go): SIGSTOP does not count, so one SIGCONT would undo those
// stops too, and the incident they lead to would find its orphan running
// ("holder not stopped"; a shared main captured while the writer
// checkpointed into it).
func (w *worker) thaw(pid int, f frozenProc, why string) {
	thawed, err := w.stops.release(f.ref, w.owns)
	switch {
	case !thawed:
		w.log.Debug("holder left stopped: another claim or its incident holds it", "pid", pid, "reason", why)
	case errors.Is(err, holders.ErrProcessGone) || why == "":
		w.log.Debug("holder resumed", "pid", pid, "err", err)
	default:
		w.log.Warn("holder thawed", "event", EventHolderThawed, "pid", pid, "reason", why,
			"stopped_ms", float64(time.Since(f.at).Microseconds())/1000, "err", err)
	}
}

// freezeOrphans stops the orphans the policy says to stop that the fast
// path did not, and returns the orphans left with the incident's kind and
// policy. One that exited since the scan (its freeze finds it gone) is
// dropped: a dead holder opens no incident, and with none left the change
// is a plain generation change (check runs lostWAL on it).
func (w *worker) freezeOrphans(orphans []holders.Process, frozen map[int]frozenProc) ([]holders.Process, journal.Kind, incident.Policy) {
	if len(orphans) == 0 {
		return nil, "", ""
	}
	kind := classify(orphans)
	policy := w.a.policies(w.st.Path).For(kind)
	if policy == incident.PolicyObserve {
		w.thawAll(frozen, "the incident's policy is observe") // the fast path guessed another kind
	}
	live := orphans[:0]
	for i := range orphans {
		p := &orphans[i]
		// A read-only holder cannot write the orphan, and another user's
		// process holding none of SQLite's locks is not the store's to
		// stop: both are pinned and reported by the incident, never
		// signalled.
		if _, done := frozen[p.Pid]; done || policy == incident.PolicyObserve || w.a.excluded(p) || !p.MayWrite() || !p.MaySignal() {
			live = append(live, *p)
			continue
		}
		err := w.stops.stop(p.Ref())
		switch {
		case err == nil:
			frozen[p.Pid] = frozenProc{ref: p.Ref(), at: time.Now()}
		case errors.Is(err, holders.ErrProcessGone):
			w.log.Debug("orphan holder exited before it could be frozen", "pid", p.Pid)
			continue
		default:
			w.log.Warn("freeze failed", "pid", p.Pid, "err", err)
		}
		live = append(live, *p)
	}
	if len(live) == 0 {
		return nil, "", ""
	}
	return live, kind, policy
}

// openIncident hands the orphans, frozen per policy, to the engine.
func (w *worker) openIncident(orphans []holders.Process, kind journal.Kind, policy incident.Policy, frozen map[int]frozenProc, at, seenAt time.Time, old *journal.GenerationRecord, gen store.Generation, cut *store.WALCut) {
	w.claimGuardWAL(orphans)
	at2, after := frozenTimes(frozen)
	o := incident.Opening{Kind: kind, Policy: policy, Orphans: orphans, Frozen: at2, FrozenAfter: after, At: at, SeenAt: seenAt,
		Old: old, New: generationRecord(gen), Cut: cut}
	if found, fcut := w.foundAtStart(orphans, old != nil); found != nil {
		o.FoundLate, o.ChangedAfter, o.Evidence, o.Cut = true, found.since, found.evidence, fcut
	}
	w.engine().Open(o)
	w.stops.handOver(frozen) // the incident's now; one its journal refused it has thawed
}

// Settle times: a change is classified once no further event for the
// store arrived for settleQuiet, or after settleMax at the latest.
const (
	settleQuiet = 25 * time.Millisecond
	settleMax   = 250 * time.Millisecond
)

// settle waits until the store's directory has been quiet for
// settleQuiet and returns the generation then. A change that arrives while
// it waits (a restore right after a writer created its sidecars) still
// gets the fast-path freeze at once.
func (w *worker) settle(frozen map[int]frozenProc) (store.Generation, time.Time) {
	deadline := time.Now().Add(settleMax)
	for {
		quiet := time.NewTimer(min(settleQuiet, time.Until(deadline)))
		select {
		case kicked := <-w.kickC:
			quiet.Stop()
			gen, at := w.readGen()
			if w.haveGen && gen.Diff(w.gen).Same() {
				w.unchangedAt = at
			}
			w.takeEarly(frozen)
			w.fastFreeze(gen, frozen, w.changeSeen(kicked))
			if time.Now().Before(deadline) {
				continue
			}
		case <-quiet.C:
		case <-w.stop:
			quiet.Stop()
		}
		return w.readGen()
	}
}

// readGen is readGeneration and when it began.
func (w *worker) readGen() (store.Generation, time.Time) {
	at := time.Now()
	return w.readGeneration(), at
}

// changeSeen is when the change a check classifies was seen: at, the
// time of what set the check off, but never before the worker last read
// the store's paths and found them as it knew them. That trigger may be
// older than the change: kicks coalesce keeping the earliest, the
// reconcile walker's checks carry the time of its scan, and a kick that
// arrives while a check settles is folded into it. Taken as the time the
// change was seen, it put a restore hundreds of milliseconds before the
// rename (the incident's replaced time, and holder.frozen latencies of
// 406 ms on a writer the fast freeze stopped within 2 ms of the rename).
func (w *worker) changeSeen(at time.Time) time.Time {
	if w.unchangedAt.After(at) {
		return w.unchangedAt
	}
	return at
}

// readGeneration reads what is at the store's paths now, through the
// directory's handle (the directory discovery recorded, reached without a
// symlink). A failed read (a file missing, or changing under the read)
// still returns what lstat saw, which is what detection compares; a
// directory swapped or replaced since discovery has none of the store's
// files.
func (w *worker) readGeneration() store.Generation {
	g, err := w.st.ReadGeneration()
	if err != nil && !errors.Is(err, store.ErrFileChanged) {
		w.log.Debug("read generation", "err", err)
	}
	return g
}

// readGenerationChecked is readGeneration, and whether the store's
// directory could be read at all: false when it was refused (changed
// since discovery, gone, not reachable without a symlink), and the
// generation has none of the store's files only for that reason.
func (w *worker) readGenerationChecked() (store.Generation, bool) {
	g, err := w.st.ReadGeneration()
	if err != nil && !errors.Is(err, store.ErrFileChanged) {
		w.log.Debug("read generation", "err", err)
		return g, false
	}
	return g, true
}

func (w *worker) thawAll(frozen map[int]frozenProc, why string) {
	for pid, f := range frozen {
		w.thaw(pid, f, why)
		delete(frozen, pid)
	}
}
