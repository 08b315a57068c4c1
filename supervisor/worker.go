package supervisor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// worker is the one serialized context that acts on one store: every
// check, every protocol step and every close of a pinned fd happens on
// its goroutine, so the store's steps are serialized (docs/design.md §3:
// one worker per store, serialized). The goroutine exists only while the
// worker has something to do: a kick, a request, a deadline of its own;
// an idle store costs no goroutine (and no stack) until an event, the
// reconcile walker or a timer starts one again, and at most one runs at
// a time (running). The incidents themselves are its engine's; the worker
// detects, freezes, guards and wakes the engine.
type worker struct {
	a      *Agent
	st     store.Store
	dir    string // st.Dir(), which every reconcile's coverage asks the watcher about
	target holders.Target
	log    lazyLogger
	// eng is the store's incident engine, made on the worker goroutine
	// when the store first has an incident (engine): an idle store has
	// none. Other goroutines read it (busy, liveIDs, Stop).
	eng      atomic.Pointer[incident.Engine]
	stopping atomic.Bool // Stop came before there was an engine to tell

	kickC  chan time.Time // cap 1: kicks coalesce, keeping the earliest time
	reqC   chan func()    // operator requests run on the worker
	ticked atomic.Bool    // the worker's own deadline came (timer)
	stop   chan struct{}
	done   chan struct{}

	// running is set while a goroutine runs the worker's loop; whoever
	// sets it starts that goroutine (wakeUp), so there is never more
	// than one.
	running atomic.Bool
	// The rest belong to the worker goroutine.
	started  bool        // the first run's housekeeping is done
	timer    *time.Timer // the next deadline (wake), made on first use
	armedFor time.Time   // what timer is set for; zero: not set

	gen     store.Generation
	haveGen bool
	// unchangedAt is when the worker last read the store's paths and
	// found them as in gen: a change it finds later happened after that
	// (changeSeen).
	unchangedAt time.Time

	guard workerGuard // guard.go
	// resumes are the store's incidents a previous agent left
	// unfinished: resumed before the worker's first check.
	resumes []journal.Incident
	// noSpaceAt is the -wal whose idle checkpoint a full disk last put
	// off (idle.go), so it is said once.
	noSpaceAt fileid.ID
	// checked is set by the worker's first check; incidents take no
	// step before it (firstRun).
	checked bool
	// watched is the main inode marked for in-place writes; rws what
	// that detection shares with modwatch's goroutine (rewrite.go).
	watched     fileid.ID
	watchFailed fileid.ID // the main whose Watch failure was last said
	rws         rewriteState

	stallAt time.Time // the stall check's next run (zero: at once)

	// down is the look at what happened while no agent ran, and the WAL
	// position last journaled (whiledown.go).
	down downLook

	// seen is the generation's identities as of the last check, for the
	// reconcile walker to compare with what the full scan saw at the
	// paths; recheck asks the walker to check the store again at the next
	// reconcile (an idle checkpoint to retry).
	seen    atomic.Pointer[fileid.Family]
	recheck atomic.Bool

	// stops owns every SIGSTOP sent to a process of the store until it is
	// thawed or an incident takes it (ledger.go).
	stops stopLedger
	// early holds the processes the fast freeze stopped from kick, off
	// the worker (freezeEarly), until the next check takes them.
	earlyMu     sync.Mutex
	early       map[int]frozenProc
	earlyClosed bool // the worker stopped: nobody would confirm a freeze
	// lockPass is set while a lockFreeze runs off the worker; lockAgain
	// asks it for one more pass (freeze_locks.go).
	lockPass  atomic.Bool
	lockAgain atomic.Bool
	// lockAt is the latest kick's event (ns) a pass freezes for: a
	// pass run again for a later kick measures its freezes from that
	// kick, not from the one that started the goroutine.
	lockAt atomic.Int64
	lockWG sync.WaitGroup
	// statOwed: the next full scan must read what is at the store's
	// paths (an event came, or it was never read); auditSlot is its turn
	// to be read anyway (coverage.go).
	statOwed  atomic.Bool
	auditSlot int64
	// partialsCleaned: cleanPartials ran (or runs) for this store.
	partialsCleaned atomic.Bool
	// replayCancel ends the replay running on the worker (yieldReplay).
	replayMu     sync.Mutex
	replayCancel context.CancelCauseFunc
	replayFam    *fileid.Family // the files the running replay started on
	// eventAt is when the first store event since the last check
	// arrived (unix ns; 0: none), for the freeze latency (kickEvent).
	eventAt atomic.Int64
}

func newWorker(a *Agent, s store.Store) *worker {
	w := &worker{
		a: a, st: s, dir: s.Dir(), target: holders.Target{Path: s.Path, Dir: holders.DirRecord{ID: s.DirID.ID, UID: s.DirID.UID}},
		kickC: make(chan time.Time, 1), reqC: make(chan func(), 4),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	w.log.base, w.log.store, w.log.profile = a.opts.Logger, s.Path, s.Profile
	w.statOwed.Store(true)
	w.auditSlot = auditSlot(s.Path)
	return w
}

// engine is the store's incident engine, made on first use. Only the
// worker goroutine calls it.
func (w *worker) engine() *incident.Engine {
	if e := w.eng.Load(); e != nil {
		return e
	}
	a, s := w.a, w.st
	e := incident.New(a.ctx, s, incident.Deps{
		Journal: a.journal,
		Procs:   engineProcs{Host: incident.Host{Dir: s.DirID}, w: w},
		Salvage: incident.Recovery{Log: a.opts.Logger, Dir: s.DirID},
		Scan:    &a.cache,
		Memory:  &a.cache,
		Keeper:  a.keeper(),
		Metrics: a.opts.Metrics,
		Config: func() incident.Config {
			return incident.Config{Policies: a.policies(s.Path), CaptureMaxBytes: a.captureBudget()}
		},
		Wake:  func() { w.kick(time.Now()) },
		Log:   a.opts.Logger,
		Hooks: a.opts.Hooks,
	})
	w.eng.Store(e)
	if w.stopping.Load() {
		e.Stop()
	}
	return e
}

// owns reports whether an unfinished incident of the store handles ref.
func (w *worker) owns(ref holders.ProcRef) bool {
	e := w.eng.Load()
	return e != nil && e.Owns(ref)
}

// advance lets the store's incidents take their next steps.
func (w *worker) advance() {
	if !w.checked {
		return
	}
	if e := w.eng.Load(); e != nil {
		e.Advance()
	}
}

// stopEngine makes the store's incidents start no further step; safe
// from any goroutine.
func (w *worker) stopEngine() {
	w.stopping.Store(true)
	if e := w.eng.Load(); e != nil {
		e.Stop()
	}
}

// wakeUp starts the worker's goroutine unless one runs.
func (w *worker) wakeUp() {
	if w.running.CompareAndSwap(false, true) {
		go w.run()
	}
}

// kick asks the worker to check its store; at is when the change was
// seen. The fast freeze runs here, on the kicker's goroutine, before the
// worker wakes: the worker may be busy with a long step (a capture, a
// divert, a replay), and a new orphan must not run on meanwhile.
func (w *worker) kick(at time.Time) {
	w.freezeEarly(at)
	select {
	case w.kickC <- at:
	default:
	}
	w.wakeUp()
}

// kickEvent is kick for an event at the store's paths or in its main:
// the check it asks for measures its freezes from the first such event
// since the last check, not from an earlier kick still queued.
func (w *worker) kickEvent(at time.Time) {
	w.eventAt.CompareAndSwap(0, at.UnixNano())
	w.kick(at)
}

// takeEventAt returns and clears the first event's time since the last
// check (zero: none).
func (w *worker) takeEventAt() time.Time {
	if ns := w.eventAt.Swap(0); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// do runs f on the worker goroutine and waits for it.
func (w *worker) do(ctx context.Context, f func()) error {
	done := make(chan struct{})
	w.wakeUp()
	select {
	case w.reqC <- func() { f(); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.done:
		return errors.New("store worker stopped")
	}
	// The goroutine may have gone idle between the wake and the send.
	w.wakeUp()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopAndWait lets the step in flight finish (and be journaled), starts
// no other, and waits for the worker to close its pins and guard.
func (w *worker) stopAndWait() {
	w.stopEngine()
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wakeUp() // an idle worker has no goroutine to see the stop
	<-w.done
}

// busy reports whether the worker has an unfinished incident.
func (w *worker) busy() bool {
	e := w.eng.Load()
	return e != nil && e.Busy()
}

// liveIDs lists the worker's unfinished incidents.
func (w *worker) liveIDs() []string {
	if e := w.eng.Load(); e != nil {
		return e.IDs()
	}
	return nil
}

// run is one stretch of the worker's goroutine: it works until nothing is
// left to do and then ends (idle), or until the worker stops (for good:
// pins, guard and watch closed, done closed).
func (w *worker) run() {
	if !w.started {
		w.started = true
		w.firstRun()
	}
	for {
		// An earlier deadline already armed stands, so a stream of
		// kicks cannot keep pushing an open incident's tick away; a
		// deadline that went away only costs one spurious wake.
		if next := w.wake(time.Now()); !next.IsZero() && (w.armedFor.IsZero() || next.Before(w.armedFor)) {
			w.armedFor = next
			w.setTimer(max(time.Until(next), 0))
		}
		if w.ticked.Swap(false) {
			w.armedFor = time.Time{}
			// Deadlines (terminate grace, retries after no space) are
			// checked once a second while an incident is open.
			now := time.Now()
			w.advance()
			w.checkStall(now)
			w.guardTick(now)
			continue // the next deadline is armed before going idle
		}
		select {
		case <-w.stop:
			w.finish()
			return
		case <-w.a.ctx.Done():
			w.finish()
			return
		case at := <-w.kickC:
			w.check(at)
			w.advance()
		case f := <-w.reqC:
			f()
			w.advance()
		default:
			if w.idle() {
				return
			}
		}
	}
}

// idle ends the goroutine's stretch when nothing is queued: it reports
// true when the goroutine should return. Whoever queues something after
// running is cleared starts a new goroutine; something queued before is
// seen here, and this goroutine carries on unless a new one already won.
func (w *worker) idle() bool {
	w.running.Store(false)
	if len(w.kickC) == 0 && len(w.reqC) == 0 && !w.ticked.Load() && !w.stopped() && w.a.ctx.Err() == nil {
		return true
	}
	return !w.running.CompareAndSwap(false, true)
}

func (w *worker) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// setTimer arms the worker's one timer: when it fires, a tick is queued
// and the goroutine started if it was idle.
func (w *worker) setTimer(d time.Duration) {
	if w.timer == nil {
		w.timer = time.AfterFunc(d, func() {
			w.ticked.Store(true)
			w.wakeUp()
		})
		return
	}
	w.timer.Reset(d)
}

// firstRun is the worker's housekeeping before its first check.
func (w *worker) firstRun() {
	if len(w.resumes) > 0 {
		// Before the resumed incidents capture again; every other
		// store's are cleaned by the reconcile walker (walker.go).
		w.cleanPartials()
	}
	for _, inc := range w.resumes {
		w.engine().Resume(inc)
	}
	if len(w.resumes) > 0 {
		// Their steps wait for the first check (advance does nothing
		// before it): that check watches the live main for in-place
		// writes and syncs the guard, and a resumed divert takes
		// seconds, during which a cp over the main went unseen. A
		// request or a tick can come before any kick, so the check
		// runs here rather than waiting for one.
		w.check(time.Now())
	}
	w.resumes = nil
}

// cleanPartials removes, once, the staging directories a capture of an
// agent that died mid-capture left: they are finished by the incident's
// resume or are garbage, and CleanPartials keeps any that still holds
// quarantined originals, or whose agent (this one included) is alive. Safe
// from any goroutine.
func (w *worker) cleanPartials() {
	if w.partialsCleaned.Swap(true) {
		return
	}
	if removed, err := recovery.CleanPartials(w.st.Path, w.st.DirID, w.a.opts.Logger); err == nil && len(removed) > 0 {
		w.log.Info("stale partial captures removed", "dirs", removed)
	}
}

// finish is the worker's end: pins are the only thing keeping an orphan
// alive, so they close last, after the journal knows where each incident
// stands, and after the guard and the main's watch.
func (w *worker) finish() {
	defer close(w.done)
	if w.timer != nil {
		w.timer.Stop()
	}
	w.unwatchMain()
	w.guardClose()
	w.closeEarly()
	if e := w.eng.Load(); e != nil {
		e.Close()
	}
}

// wakeBusy is how often a store with an unfinished incident, or a guard
// arm to retry, is looked at again.
const wakeBusy = time.Second

// wake is when the worker next has something to do by itself, zero for
// never: once a second while an incident is open, when a guard arm is to
// be retried, when a guard pause ends, and when the stall check is due.
func (w *worker) wake(now time.Time) time.Time {
	var next time.Time
	at := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if w.busy() {
		at(now.Add(wakeBusy))
	}
	if w.guard.retry {
		at(w.guard.retryAt)
	}
	if p := w.guard.pause; p != nil {
		at(p.Until)
	}
	if w.stallWanted() {
		at(w.stallAt)
	}
	return next
}

// checkStall runs the stall watch when it is due. A store without a -wal
// has no open connection to stall, and reading it would create one.
func (w *worker) checkStall(now time.Time) {
	sw := w.a.opts.Stall
	if !w.stallWanted() || now.Before(w.stallAt) || !sw.Due(w.st.Path, now) {
		return
	}
	w.stallAt = now.Add(StallCheckInterval)
	events, err := sw.Check(w.a.ctx, w.st, now)
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

// stallWanted reports whether the stall watch applies to this store now.
// A store without a -wal has no open connection to stall, and reading it
// would create one.
func (w *worker) stallWanted() bool {
	return w.a.opts.Stall.Enabled() && w.st.Kind == store.Hermes && w.gen.WAL.Exists
}
