package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// worker is the one goroutine that acts on one store: every check, every
// protocol step and every close of a pinned fd happens here, so the
// store's steps are serialized (DESIGN.md: "per store, serialized").
type worker struct {
	a      *Agent
	st     store.Store
	target holders.Target
	log    *slog.Logger

	kickC chan time.Time // cap 1: kicks coalesce, keeping the earliest time
	reqC  chan func()    // operator requests run on the worker
	stop  chan struct{}
	done  chan struct{}

	gen     store.Generation
	haveGen bool
	guard   workerGuard // guard.go
	// resumes are the store's incidents a previous agent left
	// unfinished: resumed before the worker's first check.
	resumes []journal.Incident

	mu   sync.Mutex // guards live for readers outside the worker
	live map[string]*liveIncident
}

func newWorker(a *Agent, s store.Store) *worker {
	return &worker{
		a: a, st: s, target: holders.Target{Path: s.Path},
		log:   a.opts.Logger.With("subsystem", "supervisor", "store", s.Path, "profile", s.Profile),
		kickC: make(chan time.Time, 1), reqC: make(chan func(), 8),
		stop: make(chan struct{}), done: make(chan struct{}),
		live: map[string]*liveIncident{},
	}
}

// kick asks the worker to check its store; at is when the change was seen.
func (w *worker) kick(at time.Time) {
	select {
	case w.kickC <- at:
	default:
	}
}

// do runs f on the worker goroutine and waits for it.
func (w *worker) do(ctx context.Context, f func()) error {
	done := make(chan struct{})
	select {
	case w.reqC <- func() { f(); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.done:
		return errors.New("store worker stopped")
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *worker) stopAndWait() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// busy reports whether the worker has an unfinished incident.
func (w *worker) busy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.live) > 0
}

func (w *worker) run() {
	defer close(w.done)
	// A capture staged by an agent that died mid-capture is finished by
	// the incident's resume or is garbage; CleanPartials keeps any that
	// still holds quarantined originals.
	if removed, err := recovery.CleanPartials(w.st.Path); err == nil && len(removed) > 0 {
		w.log.Info("stale partial captures removed", "dirs", removed)
	}
	// Pins are the only thing keeping an orphan alive; they close with
	// the worker, after the journal knows where each incident stands.
	defer w.closeAllPins()
	defer w.guardClose()
	for _, inc := range w.resumes {
		w.resume(inc)
	}
	w.resumes = nil
	w.advanceAll()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-w.a.ctx.Done():
			return
		case at := <-w.kickC:
			w.check(at)
			w.advanceAll()
		case f := <-w.reqC:
			f()
			w.advanceAll()
		case now := <-tick.C:
			// Deadlines (terminate grace, retries after no space) are
			// checked once a second; only incidents waiting on time do work.
			if w.busy() {
				w.advanceAll()
			}
			w.checkStall(now)
			w.guardTick(now)
		}
	}
}

// check compares what is at the store's paths with what the worker last
// saw and with the processes holding the store's inodes. Any process that
// holds an inode no longer at its path is an orphan holder: it is frozen
// first (from the holder cache, before anything else is read), and an
// incident is opened for it.
func (w *worker) check(at time.Time) {
	gen := w.readGeneration()
	frozen := map[int]frozenProc{}
	w.fastFreeze(gen, frozen)
	if len(frozen) > 0 || (w.haveGen && !gen.Diff(w.gen).Same()) {
		// A restore is several syscalls (rename the main, then unlink
		// the sidecars, often from separate commands): classify what
		// it leaves, not the instant between two of its steps. The
		// orphans are already stopped, so waiting costs no data.
		gen = w.settle(gen, frozen)
	}
	pids := make([]int, 0, len(frozen))
	for pid := range frozen {
		pids = append(pids, pid)
	}
	var sr *holders.StoreResult
	if w.haveGen && !gen.Diff(w.gen).Same() {
		// The targeted scan re-inspects only the holders the cache knows:
		// a process that opened the store since the last full scan would
		// be missed until the next reconcile. A real change is rare and
		// worth one full scan (the known holders are already frozen).
		if res := w.a.fullScan(); res != nil {
			sr = res.Store(w.st.Path)
		}
	}
	if sr == nil {
		var err error
		if sr, err = w.a.cache.Targeted(w.target, pids...); err != nil {
			w.log.Error("targeted holder scan failed", "event", EventScanUnknown, "err", err)
			w.thawAll(frozen)
			return
		}
	}
	var orphans []holders.Process
	for _, p := range orphansNow(sr.Orphans(), w.readGeneration()) {
		// An announced restore's own process holds the old files on
		// purpose; anyone else it orphans is still protected.
		if !w.owned(p.Ref()) && !w.restorer(p.Ref()) {
			orphans = append(orphans, p)
		}
	}
	// Anything frozen by the fast path that the fresh scan does not
	// confirm as an orphan goes back to running at once.
	for pid, f := range frozen {
		if p := findPid(orphans, pid); p == nil || p.StartTicks != f.ref.StartTicks {
			_ = holders.Thaw(f.ref)
			delete(frozen, pid)
		}
	}
	if w.haveGen {
		if ch := gen.Diff(w.gen); !ch.Same() {
			w.log.Info("generation changed", "event", EventGenerationChanged, "change", ch.String(),
				"main", gen.Main.ID, "wal", gen.WAL.ID, "shm", gen.SHM.ID, "intended", w.intended())
			if len(orphans) == 0 {
				w.checkForeignSidecars(ch, gen, sr)
				w.lostWAL(ch, w.gen, gen, at)
			}
		}
	}
	old, hadGen := w.gen, w.haveGen
	w.gen, w.haveGen = gen, true
	defer w.checkpointIdle(gen, sr) // after the guard is synced: deferred calls run last first
	defer w.guardSync(gen)
	if len(orphans) == 0 {
		return
	}
	kind := classify(orphans)
	policy := w.a.policies(w.st.Path).For(kind)
	if policy == PolicyObserve {
		w.thawAll(frozen) // the fast path guessed another kind
	}
	for i := range orphans {
		p := &orphans[i]
		if _, done := frozen[p.Pid]; done || policy == PolicyObserve || w.a.excluded(p) {
			continue
		}
		if err := holders.Freeze(p.Ref()); err == nil {
			frozen[p.Pid] = frozenProc{ref: p.Ref(), at: time.Now()}
		} else {
			w.log.Warn("freeze failed", "pid", p.Pid, "err", err)
		}
	}
	var oldRec *journal.GenerationRecord
	if hadGen {
		oldRec = generationRecord(old)
	}
	w.claimGuardWAL(orphans)
	w.openIncident(kind, policy, orphans, frozen, at, oldRec, gen, nil)
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
// scan saw holding an inode that is not the one at its path in gen; the
// targeted re-scan confirms or thaws afterwards.
func (w *worker) fastFreeze(gen store.Generation, frozen map[int]frozenProc) {
	known, ok := w.a.cache.Known(w.target)
	if !ok {
		return
	}
	pol := w.a.policies(w.st.Path)
	for i := range known.Holders {
		p := &known.Holders[i]
		if _, done := frozen[p.Pid]; done || !holdsStale(p, gen) || w.owned(p.Ref()) || w.a.excluded(p) || w.restorer(p.Ref()) {
			continue
		}
		if pol.For(guessKind(p, gen)) == PolicyObserve {
			continue
		}
		if err := holders.Freeze(p.Ref()); err == nil {
			frozen[p.Pid] = frozenProc{ref: p.Ref(), at: time.Now()}
		}
	}
}

// frozenProc is a process this check stopped, and when.
type frozenProc struct {
	ref holders.ProcRef
	at  time.Time
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

// owned reports whether a live incident of this store already handles p.
func (w *worker) owned(ref holders.ProcRef) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, li := range w.live {
		if w.ownedBy(li, ref) {
			return true
		}
	}
	return false
}

func (w *worker) thawAll(frozen map[int]frozenProc) {
	for pid, f := range frozen {
		_ = holders.Thaw(f.ref)
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

// checkStall runs the stall watch when it is due. A store without a -wal
// has no open connection to stall, and reading it would create one.
func (w *worker) checkStall(now time.Time) {
	sw := w.a.opts.Stall
	if sw == nil || w.st.Kind != store.Hermes || !w.gen.WAL.Exists || !sw.Due(w.st.Path, now) {
		return
	}
	events, err := sw.Check(w.a.ctx, w.st.Path, now)
	if err != nil {
		w.log.Debug("stall check", "err", err)
		return
	}
	for _, e := range events {
		args := []any{"event", e.Event}
		for k, v := range e.Fields() {
			if k != "event" && k != "store" {
				args = append(args, k, v)
			}
		}
		if e.Event == EventStallDetected {
			w.log.Warn("stall detected", args...)
		} else {
			w.log.Info("stall cleared", args...)
		}
	}
}
