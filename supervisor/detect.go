package supervisor

import (
	"errors"
	"path/filepath"
	"time"

	"github.com/stateguard/stateguard/fileid"
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
	w.openRewrites()
	gen := w.readGeneration()
	if !w.haveGen || gen.Main.ID == w.gen.Main.ID {
		// A main that is new at the path is a generation change, which
		// this check classifies (mispaired, replaced) before it is
		// watched: what writes it meanwhile (tar -x, cp after a mv
		// aside) fills a file no live WAL is paired with yet.
		w.watchMain(gen.Main)
	}
	w.rws.mainSize.Store(gen.Main.Size)
	frozen := map[int]frozenProc{}
	w.takeEarly(frozen)
	w.fastFreeze(gen, frozen)
	cut := w.walCut(gen)
	changed := w.haveGen && !gen.Diff(w.gen).Same()
	if len(frozen) > 0 || changed {
		w.armOnOpen(gen)
		// A restore is several syscalls (rename the main, then unlink
		// the sidecars, often from separate commands): classify what
		// it leaves, not the instant between two of its steps. The
		// orphans are already stopped, so waiting costs no data.
		gen = w.settle(gen, frozen)
		changed = w.haveGen && !gen.Diff(w.gen).Same()
		w.armOnOpen(gen) // the -shm comes just after the -wal
		if cut == nil {
			cut = w.walCut(gen)
		}
	}
	sr, ok := w.scan(changed, frozen)
	if !ok {
		return
	}
	// A rewrite seen while this check settled began what it sees (cp,
	// then rm of the sidecars): its incident takes the writers first.
	w.openRewrites()
	orphans := w.confirm(sr, frozen)
	old, hadGen := w.gen, w.haveGen
	if changed {
		ch := gen.Diff(old)
		w.log.Info("generation changed", "event", EventGenerationChanged, "change", ch.String(),
			"main", gen.Main.ID, "wal", gen.WAL.ID, "shm", gen.SHM.ID, "intended", w.intended())
		if len(orphans) == 0 {
			w.checkForeignSidecars(ch, old, gen, sr, at)
			w.lostWAL(ch, old, gen, at)
		}
	}
	w.gen, w.haveGen = gen, true
	w.watchMain(gen.Main)
	fam := gen.IDs()
	w.seen.Store(&fam)
	w.recheck.Store(false)
	defer w.checkpointIdle(gen, sr) // after the guard is synced: deferred calls run last first
	defer w.guardSync(gen)
	if len(orphans) > 0 {
		var oldRec *journal.GenerationRecord
		if hadGen {
			oldRec = generationRecord(old)
		}
		w.openIncident(orphans, frozen, at, oldRec, gen, cut)
	}
}

// armOnOpen arms the guard at once when gen is only a connection opening
// the store (sidecarsCreated): the settle and the full scan (which waits
// for any other store's or the reconcile walker's scan) can take longer
// than that connection lives, and the guard must hold the new -shm before
// the connection can be its last closer. The check's own guardSync after
// the scan finds it armed.
func (w *worker) armOnOpen(gen store.Generation) {
	if w.haveGen && sidecarsCreated(gen.Diff(w.gen)) {
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
// froze someone, and otherwise the cache's last result. On failure every
// fast-path freeze is undone.
func (w *worker) scan(changed bool, frozen map[int]frozenProc) (*holders.StoreResult, bool) {
	if changed {
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
		if known, ok := w.a.cache.Known(w.target); ok {
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
	now := w.readGeneration()
	closer := closingPid(w.st, now)
	for _, p := range orphansNow(sr.Orphans(), now) {
		if !w.eng.Owns(p.Ref()) && !w.restorer(p.Ref()) && !isCloser(&p, now, closer) && (p.MayWrite() || holdsStaleData(&p, now)) {
			orphans = append(orphans, p)
		}
	}
	for pid, f := range frozen {
		if w.eng.Owns(f.ref) {
			delete(frozen, pid) // an incident froze it too, and releases it
			continue
		}
		p := findPid(orphans, pid)
		var why string
		switch {
		case p == nil || p.StartTicks != f.ref.StartTicks:
			why = "the confirming scan shows it holding no orphaned inode"
		case !p.MayWrite():
			why = "it holds the orphan read-only"
		default:
			continue
		}
		w.thaw(pid, f, why)
		delete(frozen, pid)
	}
	return orphans
}

// holdsStaleData reports whether p holds a main or -wal that is not the
// one at its path in g: what a read-only holder must hold for there to be
// anything to capture. One that holds only an old -shm (rebuilt from the
// WAL, never captured) is no incident: often it is not even the store's
// (an unrelated file that got a freed -shm's inode number).
func holdsStaleData(p *holders.Process, g store.Generation) bool {
	for _, f := range p.Files {
		if cur := fileOf(g, f.Role); f.Role != holders.RoleSHM && (!cur.Exists || cur.ID != f.ID) {
			return true
		}
	}
	return false
}

// thaw resumes a process this check stopped and says why.
func (w *worker) thaw(pid int, f frozenProc, why string) {
	err := holders.Thaw(f.ref)
	if errors.Is(err, holders.ErrProcessGone) {
		return
	}
	w.log.Warn("holder thawed", "event", EventHolderThawed, "pid", pid, "reason", why,
		"stopped_ms", float64(time.Since(f.at).Microseconds())/1000, "err", err)
}

// orphansNow keeps the orphans that hold an inode that is not the one at
// its path in now, read after the scan. The scan lstats the paths before
// it inspects the processes: a process that opened the store's next
// generation in between (a gateway starting right after the sidecars were
// removed) holds files the scan saw as not current, and is no orphan.
func orphansNow(orphans []holders.Process, now store.Generation) []holders.Process {
	var out []holders.Process
	for i := range orphans {
		if holdsStale(&orphans[i], now) {
			out = append(out, orphans[i])
		}
	}
	return out
}

// openIncident freezes the orphans the policy says to freeze that the
// fast path did not, and hands them to the engine.
func (w *worker) openIncident(orphans []holders.Process, frozen map[int]frozenProc, at time.Time, old *journal.GenerationRecord, gen store.Generation, cut *store.WALCut) {
	kind := classify(orphans)
	policy := w.a.policies(w.st.Path).For(kind)
	if policy == incident.PolicyObserve {
		w.thawAll(frozen, "the incident's policy is observe") // the fast path guessed another kind
	}
	for i := range orphans {
		p := &orphans[i]
		// A read-only holder cannot write the orphan: it is pinned and
		// reported by the incident, never signalled.
		if _, done := frozen[p.Pid]; done || policy == incident.PolicyObserve || w.a.excluded(p) || !p.MayWrite() {
			continue
		}
		if err := holders.Freeze(p.Ref()); err == nil {
			frozen[p.Pid] = frozenProc{ref: p.Ref(), at: time.Now()}
		} else {
			w.log.Warn("freeze failed", "pid", p.Pid, "err", err)
		}
	}
	w.claimGuardWAL(orphans)
	at2 := make(map[int]time.Time, len(frozen))
	for pid, f := range frozen {
		at2[pid] = f.at
	}
	w.eng.Open(incident.Opening{Kind: kind, Policy: policy, Orphans: orphans, Frozen: at2, At: at,
		Old: old, New: generationRecord(gen), Cut: cut})
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
func (w *worker) settle(gen store.Generation, frozen map[int]frozenProc) store.Generation {
	deadline := time.Now().Add(settleMax)
	for {
		quiet := time.NewTimer(min(settleQuiet, time.Until(deadline)))
		select {
		case <-w.kickC:
			quiet.Stop()
			gen = w.readGeneration()
			w.takeEarly(frozen)
			w.fastFreeze(gen, frozen)
			if time.Now().Before(deadline) {
				continue
			}
		case <-quiet.C:
		case <-w.stop:
			quiet.Stop()
		}
		return w.readGeneration()
	}
}

// readGeneration reads what is at the store's paths now. A failed read
// (a file missing, or changing under the read) still returns what lstat
// saw, which is what detection compares.
func (w *worker) readGeneration() store.Generation {
	g, err := store.ReadGeneration(w.st.Path)
	if err != nil && !errors.Is(err, store.ErrFileChanged) {
		w.log.Debug("read generation", "err", err)
	}
	return g
}

// fastFreeze stops, from the holder cache alone, every process the last
// scan saw able to write an inode that is not the one at its path in gen
// and that still holds it now (one stat per fd: the cache is older than
// the change, and SQLite's own last closer has closed its -wal before it
// unlinks it); the targeted re-scan confirms or thaws afterwards. A
// process that only reads the store is never stopped, nor one that is
// closing the store as its last connection.
func (w *worker) fastFreeze(gen store.Generation, frozen map[int]frozenProc) {
	known, ok := w.a.cache.Known(w.target)
	if !ok {
		return
	}
	pol := w.a.policies(w.st.Path)
	closer := -1 // not asked yet
	for i := range known.Holders {
		p := &known.Holders[i]
		if _, done := frozen[p.Pid]; done || !p.MayWrite() || !holdsStale(p, gen) || w.eng.Owns(p.Ref()) || w.a.excluded(p) || w.restorer(p.Ref()) {
			continue
		}
		if pol.For(guessKind(p, gen)) == incident.PolicyObserve || !stillHoldsStale(p, gen) {
			continue
		}
		if closer < 0 {
			closer = closingPid(w.st, gen)
		}
		if isCloser(p, gen, closer) {
			continue
		}
		if err := holders.Freeze(p.Ref()); err == nil {
			frozen[p.Pid] = frozenProc{ref: p.Ref(), at: time.Now()}
		}
	}
}

// stillHoldsStale reports whether p still holds, now, one of the inodes
// the cache says it holds that is not at its path in g.
func stillHoldsStale(p *holders.Process, g store.Generation) bool {
	for _, f := range p.Files {
		if cur := fileOf(g, f.Role); (!cur.Exists || cur.ID != f.ID) && holders.StillHolds(p, f.ID) {
			return true
		}
	}
	return false
}

// closingPid is the pid of a process holding the store's main (the one
// in g) EXCLUSIVE, 0 when none does or the main cannot be reached safely.
// It runs in the fast freeze's path, inside a directory a user owns: the
// main is opened from the profile directory's handle (no symlink in any
// component, the directory discovery recorded), never by its name, and
// must be the inode in g.
func closingPid(s store.Store, g store.Generation) int {
	if !g.Main.Exists || !g.Main.Regular() {
		return 0
	}
	h, err := s.OpenDir()
	if err != nil {
		return 0
	}
	defer h.Close()
	f, err := h.OpenFile(filepath.Base(s.Path))
	if err != nil {
		return 0
	}
	defer f.Close() // the agent's SQLite uses OFD locks: this close cancels none
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fileid.Of(fi).ID != g.Main.ID {
		return 0
	}
	pid, _ := holders.ExclusiveLocker(f)
	return pid
}

// isCloser reports whether p is SQLite's last closer of the store, caught
// between unlinking its own -shm and closing it: it holds the current
// main EXCLUSIVE (pid closer) and a -shm (a connection in
// locking_mode=EXCLUSIVE, the other way to hold it so, uses none), and
// every inode it holds that is not at its path is a sidecar. Stopping it
// would only stop a clean close; a writer whose sidecars someone else
// unlinked never holds the main EXCLUSIVE.
func isCloser(p *holders.Process, g store.Generation, closer int) bool {
	if closer <= 0 || p.Pid != closer {
		return false
	}
	shm := false
	for _, f := range p.Files {
		switch {
		case f.Role == holders.RoleMain && (!g.Main.Exists || f.ID != g.Main.ID):
			return false
		case f.Role == holders.RoleSHM:
			shm = true
		}
	}
	return shm
}

// freezeEarly is the fast freeze run by kick, on the caller's goroutine:
// what it stops waits in w.early for the worker's next check, which
// confirms or thaws it like any fast-path freeze. Everything fastFreeze
// reads is safe from any goroutine (the cache, the engine's holders, the
// policies and the restore intents take their own locks).
func (w *worker) freezeEarly() {
	gen := w.readGeneration()
	w.earlyMu.Lock()
	defer w.earlyMu.Unlock()
	if w.earlyClosed {
		return
	}
	if w.early == nil {
		w.early = map[int]frozenProc{}
	}
	w.fastFreeze(gen, w.early)
}

// closeEarly, when the worker stops, thaws what the early freeze stopped
// and no check took: nobody stays stopped without an incident.
func (w *worker) closeEarly() {
	w.earlyMu.Lock()
	defer w.earlyMu.Unlock()
	w.earlyClosed = true
	w.thawAll(w.early, "the store's worker stopped before a check confirmed the freeze")
}

// takeEarly moves the early freezes into this check's. One an incident
// owns by now (a check opened it after the freeze) is the incident's:
// this check must not thaw it as unconfirmed.
func (w *worker) takeEarly(frozen map[int]frozenProc) {
	w.earlyMu.Lock()
	defer w.earlyMu.Unlock()
	for pid, f := range w.early {
		delete(w.early, pid)
		if _, have := frozen[pid]; have || w.eng.Owns(f.ref) {
			continue
		}
		frozen[pid] = f
	}
}

// frozenProc is a process this check stopped, and when.
type frozenProc struct {
	ref holders.ProcRef
	at  time.Time
}

// holdsStale reports whether a cached holder holds an inode of the store
// that is not the one now at its path.
func holdsStale(p *holders.Process, g store.Generation) bool {
	for _, f := range p.Files {
		cur := fileOf(g, f.Role)
		if !cur.Exists || cur.ID != f.ID {
			return true
		}
	}
	return false
}

func fileOf(g store.Generation, r holders.Role) fileid.State {
	switch r {
	case holders.RoleWAL:
		return g.WAL
	case holders.RoleSHM:
		return g.SHM
	}
	return g.Main
}

// guessKind classifies one cached holder against a generation, for the
// fast path's policy look-up only.
func guessKind(p *holders.Process, g store.Generation) journal.Kind {
	for _, f := range p.Files {
		if f.Role == holders.RoleMain && (!g.Main.Exists || g.Main.ID != f.ID) {
			return journal.KindReplaced
		}
	}
	return journal.KindSidecarLost
}

// classify names the incident from the fresh scan's orphan holders: the
// main replaced with the old sidecars still at the path is mispaired,
// main replaced otherwise is replaced, and orphaned sidecars under the
// same main are sidecar_lost.
func classify(orphans []holders.Process) journal.Kind {
	kind := journal.KindSidecarLost
	for _, p := range orphans {
		mainGone, sidecarCurrent := false, false
		for _, f := range p.Files {
			switch {
			case f.Role == holders.RoleMain && !f.Current:
				mainGone = true
			case f.Role != holders.RoleMain && f.Current:
				sidecarCurrent = true
			}
		}
		if mainGone && sidecarCurrent {
			return journal.KindMispaired
		}
		if mainGone {
			kind = journal.KindReplaced
		}
	}
	return kind
}

func (w *worker) thawAll(frozen map[int]frozenProc, why string) {
	for pid, f := range frozen {
		w.thaw(pid, f, why)
		delete(frozen, pid)
	}
}

func findPid(ps []holders.Process, pid int) *holders.Process {
	for i := range ps {
		if ps[i].Pid == pid {
			return &ps[i]
		}
	}
	return nil
}
