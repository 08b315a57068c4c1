package supervisor

import (
	"context"
	"errors"
	"log/slog"
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

// worker is the one goroutine that acts on one store: every check, every
// protocol step and every close of a pinned fd happens here, so the
// store's steps are serialized (docs/design.md §3: one worker per store, serialized). The
// incidents themselves are its engine's; the worker detects, freezes,
// guards and wakes the engine.
type worker struct {
	a      *Agent
	st     store.Store
	target holders.Target
	log    *slog.Logger
	eng    *incident.Engine

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
	// watched is the main inode marked for in-place writes; rws what
	// that detection shares with modwatch's goroutine (rewrite.go).
	watched     fileid.ID
	watchFailed fileid.ID // the main whose Watch failure was last said
	rws         rewriteState

	stallAt time.Time // the stall check's next run (zero: at once)

	// seen is the generation's identities as of the last check, for the
	// reconcile walker to compare with what the full scan saw at the
	// paths; recheck asks the walker to check the store again at the next
	// reconcile (an idle checkpoint to retry).
	seen    atomic.Pointer[fileid.Family]
	recheck atomic.Bool

	// early holds the processes the fast freeze stopped from kick, off
	// the worker (freezeEarly), until the next check takes them.
	earlyMu     sync.Mutex
	early       map[int]frozenProc
	earlyClosed bool // the worker stopped: nobody would confirm a freeze
}

func newWorker(a *Agent, s store.Store) *worker {
	w := &worker{
		a: a, st: s, target: holders.Target{Path: s.Path},
		log:   a.opts.Logger.With("subsystem", "supervisor", "store", s.Path, "profile", s.Profile),
		kickC: make(chan time.Time, 1), reqC: make(chan func(), 8),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	w.eng = incident.New(a.ctx, s, incident.Deps{
		Journal: a.journal,
		Procs:   incident.Host{},
		Salvage: incident.Recovery{Log: a.opts.Logger, Dir: s.DirID},
		Scan:    &a.cache,
		Memory:  &a.cache,
		Metrics: a.opts.Metrics,
		Config: func() incident.Config {
			return incident.Config{Policies: a.policies(s.Path), CaptureMaxBytes: a.captureBudget()}
		},
		Wake:  func() { w.kick(time.Now()) },
		Log:   a.opts.Logger,
		Hooks: a.opts.Hooks,
	})
	return w
}

// kick asks the worker to check its store; at is when the change was
// seen. The fast freeze runs here, on the kicker's goroutine, before the
// worker wakes: the worker may be busy with a long step (a capture, a
// divert, a replay), and a new orphan must not run on meanwhile.
func (w *worker) kick(at time.Time) {
	w.freezeEarly()
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

// stopAndWait lets the step in flight finish (and be journaled), starts
// no other, and waits for the worker to close its pins and guard.
func (w *worker) stopAndWait() {
	w.eng.Stop()
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// busy reports whether the worker has an unfinished incident.
func (w *worker) busy() bool { return w.eng.Busy() }

// liveIDs lists the worker's unfinished incidents.
func (w *worker) liveIDs() []string { return w.eng.IDs() }

func (w *worker) run() {
	defer close(w.done)
	defer w.closeEarly()
	// A capture staged by an agent that died mid-capture is finished by
	// the incident's resume or is garbage; CleanPartials keeps any that
	// still holds quarantined originals.
	if removed, err := recovery.CleanPartials(w.st.Path, w.log); err == nil && len(removed) > 0 {
		w.log.Info("stale partial captures removed", "dirs", removed)
	}
	// Pins are the only thing keeping an orphan alive; they close with
	// the worker, after the journal knows where each incident stands.
	defer w.eng.Close()
	defer w.guardClose()
	defer w.unwatchMain()
	for _, inc := range w.resumes {
		w.eng.Resume(inc)
	}
	w.resumes = nil
	w.eng.Advance()
	// No ticker: an idle store costs nothing until an event, a reconcile
	// or its own next deadline (wake) says otherwise.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var armedFor time.Time
	for {
		// An earlier deadline already armed stands, so a stream of
		// kicks cannot keep pushing an open incident's tick away; a
		// deadline that went away only costs one spurious wake.
		if next := w.wake(time.Now()); !next.IsZero() && (armedFor.IsZero() || next.Before(armedFor)) {
			timer.Stop()
			armedFor = next
			timer.Reset(max(time.Until(next), 0))
		}
		select {
		case <-w.stop:
			return
		case <-w.a.ctx.Done():
			return
		case at := <-w.kickC:
			w.check(at)
			w.eng.Advance()
		case f := <-w.reqC:
			f()
			w.eng.Advance()
		case now := <-timer.C:
			armedFor = time.Time{}
			// Deadlines (terminate grace, retries after no space) are
			// checked once a second while an incident is open.
			if w.busy() {
				w.eng.Advance()
			}
			w.checkStall(now)
			w.guardTick(now)
		}
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

// stallWanted reports whether the stall watch applies to this store now.
// A store without a -wal has no open connection to stall, and reading it
// would create one.
func (w *worker) stallWanted() bool {
	return w.a.opts.Stall.Enabled() && w.st.Kind == store.Hermes && w.gen.WAL.Exists
}
