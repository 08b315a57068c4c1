package watcher

import (
	"errors"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
)

// dkey identifies what a debounce window is for: one store, one home, the
// reconcile stream, or one directory's watch errors.
type dkey struct {
	kind EventKind
	id   string
}

// window is a key's debounce window: the leading event went out when it
// opened; pending collects what arrives before end.
type window struct {
	end     time.Time
	pending *Event
}

// loop is the single goroutine that reads fsnotify, debounces and emits.
// All of its state is its own; only routes (atomic) and the directory
// watches (Watcher.mu) are shared.
type loop struct {
	w        *Watcher
	debounce time.Duration
	windows  map[dkey]*window
	timer    *time.Timer
	timerAt  time.Time // zero when the timer is not armed
	backlog  *Event    // a Reconcile owed to the consumer (buffer full)
}

func newLoop(w *Watcher) *loop {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &loop{w: w, debounce: w.cfg.Debounce, windows: map[dkey]*window{}, timer: t}
}

func (l *loop) run() {
	w := l.w
	defer close(w.done)
	defer close(w.events)
	defer l.timer.Stop()

	var fsEvents <-chan fsnotify.Event
	var fsErrors <-chan error
	if w.fsw != nil {
		fsEvents, fsErrors = w.fsw.Events, w.fsw.Errors
	}
	var tick <-chan time.Time
	if w.cfg.Reconcile > 0 {
		t := time.NewTicker(w.cfg.Reconcile)
		defer t.Stop()
		tick = t.C
	}
	for {
		// Offer the owed Reconcile only when there is one; a nil channel
		// never sends, so the loop never waits on the consumer.
		var out chan<- Event
		var owed Event
		if l.backlog != nil {
			out, owed = w.events, *l.backlog
		}
		select {
		case <-w.stop:
			return
		case fe, ok := <-fsEvents:
			if !ok {
				fsEvents = nil
				continue
			}
			l.handle(fe)
		case err, ok := <-fsErrors:
			if !ok {
				fsErrors = nil
				continue
			}
			reason := ReasonWatchError
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				reason = ReasonOverflow
			}
			w.log.Warn("fsnotify error; reconciling", "reason", reason, "err", err)
			l.reconcile(reason, err)
		case <-tick:
			l.reconcile(ReasonTick, nil)
		case <-w.reqC:
			l.reconcile(ReasonRequested, nil)
		case <-l.timer.C:
			l.timerAt = time.Time{}
			l.fire()
		case out <- owed:
			l.backlog = nil
		}
	}
}

// handle is the hot path: -wal writes arrive on every commit, so they are
// dropped before anything else, and everything else costs a map lookup
// unless it names a watched path.
func (l *loop) handle(fe fsnotify.Event) {
	w := l.w
	w.stats.raw.Add(1)
	op := toOp(fe.Op)
	if op == 0 {
		w.stats.writes.Add(1)
		return
	}
	rt, homes := w.routes.Load().match(fe.Name)
	if rt == nil && homes == nil {
		return
	}
	now := time.Now()
	base := filepath.Base(fe.Name)
	if rt != nil {
		if rt.dir {
			l.dirEvent(fe.Name, rt, op, now)
		} else {
			l.notifyRoute(rt, base, op, now)
		}
	}
	for _, h := range homes {
		l.notify(Event{Kind: HomeChanged, Home: h, Names: []string{base}, Ops: op, At: now, Count: 1})
	}
}

func toOp(o fsnotify.Op) Op {
	var op Op
	if o.Has(fsnotify.Create) {
		op |= Create
	}
	if o.Has(fsnotify.Remove) {
		op |= Remove
	}
	if o.Has(fsnotify.Rename) {
		op |= Rename
	}
	if o.Has(fsnotify.Chmod) {
		op |= Chmod
	}
	return op
}

func (l *loop) notifyRoute(rt *route, base string, op Op, at time.Time) {
	for _, k := range rt.keys {
		l.notify(Event{Kind: StoreChanged, Key: k, Names: []string{base}, Ops: op, At: at, Count: 1})
	}
	for _, h := range rt.homes {
		l.notify(Event{Kind: HomeChanged, Home: h, Names: []string{base}, Ops: op, At: at, Count: 1})
	}
}

// dirEvent handles a watched directory itself appearing, going away or
// changing mode. Its watch (and those below it) is re-armed or dropped
// before the event goes out, so whatever the consumer stats next is
// covered.
func (l *loop) dirEvent(d string, rt *route, op Op, at time.Time) {
	if op.Has(Create | Remove | Rename) {
		changes, errs := l.w.refreshTree(d)
		r := l.w.routes.Load()
		for _, c := range changes {
			crt := r.paths[c.path]
			if c.path == d || crt == nil {
				continue
			}
			cop := Dir | Remove
			if c.watched {
				cop = Dir | Create
			}
			l.notifyRoute(crt, filepath.Base(c.path), cop, at)
		}
		for _, e := range errs {
			l.notify(Event{Kind: WatchError, Path: e.path, Err: e.err, At: at, Count: 1})
		}
	}
	l.notifyRoute(rt, filepath.Base(d), op|Dir, at)
}

// reconcile re-checks the directory watches, then asks the consumer for a
// full reconcile.
func (l *loop) reconcile(reason string, err error) {
	now := time.Now()
	for k, win := range l.windows { // windows of keys gone quiet, or gone
		if win.pending == nil && !now.Before(win.end) {
			delete(l.windows, k)
		}
	}
	changes, errs := l.w.refreshAll(reason != ReasonTick)
	// A watch re-armed or lost here had no event of its own: its stores'
	// consumers are told, as when a directory comes or goes.
	r := l.w.routes.Load()
	for _, c := range changes {
		if rt := r.paths[c.path]; rt != nil {
			op := Dir | Remove
			if c.watched {
				op = Dir | Create
			}
			l.notifyRoute(rt, filepath.Base(c.path), op, now)
		}
	}
	for _, e := range errs {
		l.notify(Event{Kind: WatchError, Path: e.path, Err: e.err, At: now, Count: 1})
	}
	l.notify(Event{Kind: Reconcile, Reason: reason, Err: err, At: now, Count: 1})
}

// notify debounces ev on the leading edge: the first event for a key goes
// out at once, the ones that follow within the window are folded into one
// trailing event sent when the window ends.
func (l *loop) notify(ev Event) {
	if l.debounce < 0 {
		l.emit(ev)
		return
	}
	k := dkey{ev.Kind, ev.Key + ev.Home + ev.Path}
	win := l.windows[k]
	if win != nil && ev.At.Before(win.end) {
		if win.pending == nil {
			p := ev
			p.Names = slices.Clone(ev.Names)
			win.pending = &p
			l.armTimer(win.end)
			return
		}
		merge(win.pending, ev)
		return
	}
	l.emit(ev)
	if win == nil {
		win = &window{}
		l.windows[k] = win
	}
	win.end = ev.At.Add(l.debounce)
}

// fire sends the pending events of windows that ended, opening a new
// window behind each so a steady stream stays at one event per window.
func (l *loop) fire() {
	now := time.Now()
	var next time.Time
	for k, win := range l.windows {
		if now.Before(win.end) {
			if win.pending != nil && (next.IsZero() || win.end.Before(next)) {
				next = win.end
			}
			continue
		}
		if win.pending == nil {
			delete(l.windows, k)
			continue
		}
		l.emit(*win.pending)
		win.pending = nil
		win.end = now.Add(l.debounce)
	}
	if !next.IsZero() {
		l.armTimer(next)
	}
}

func (l *loop) armTimer(t time.Time) {
	if !l.timerAt.IsZero() && !t.Before(l.timerAt) {
		return
	}
	l.timerAt = t
	l.timer.Reset(time.Until(t))
}

// emit hands ev to the consumer without ever waiting: on a full buffer it
// is folded into one owed Reconcile, which the run loop offers until the
// consumer takes it. Once one is owed everything is folded into it, since
// the reconcile covers whatever happened before the consumer reads it.
func (l *loop) emit(ev Event) {
	if l.backlog == nil {
		select {
		case l.w.events <- ev:
			return
		default:
		}
	}
	l.w.stats.folded.Add(1)
	if l.backlog == nil {
		l.backlog = &Event{Kind: Reconcile, Reason: ReasonBufferFull, At: ev.At}
		l.w.log.Warn("event consumer behind; folding events into one reconcile", "buffer", cap(l.w.events))
	}
	l.backlog.Count += max(ev.Count, 1)
}

func merge(dst *Event, src Event) {
	dst.Ops |= src.Ops
	dst.Count += src.Count
	if dst.Err == nil {
		dst.Err = src.Err
	}
	for _, n := range src.Names {
		if i, found := slices.BinarySearch(dst.Names, n); !found {
			dst.Names = slices.Insert(dst.Names, i, n)
		}
	}
}
