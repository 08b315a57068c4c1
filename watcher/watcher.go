package watcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Defaults for a zero Config.
const (
	DefaultReconcile = 10 * time.Second
	// DefaultDebounce is the trailing window. The first event for a key is
	// delivered at once whatever the window; the window only folds what
	// follows it. 5 ms covers a restore's rename plus its unlinks of -wal
	// and -shm, even when a shell runs them as separate commands, into one
	// leading and one trailing event.
	DefaultDebounce = 5 * time.Millisecond
	// DefaultBuffer is the Events channel's capacity. When the consumer
	// falls this far behind, further events are folded into one pending
	// Reconcile (ReasonBufferFull) delivered as soon as there is room:
	// the consumer then re-reads every store, so nothing is lost but the
	// detail. The fsnotify reader is never blocked by the consumer.
	DefaultBuffer = 256
)

// maxSetErrors is how many unwatched directories Set's error names.
const maxSetErrors = 10

// ErrClosed is returned by Set after Close.
var ErrClosed = errors.New("watcher closed")

// Config tunes a Watcher. The zero value works.
type Config struct {
	// Reconcile is the ticker interval for full reconciles; 0 means
	// DefaultReconcile, negative disables the ticker.
	Reconcile time.Duration
	// Debounce is the per-key trailing window; 0 means DefaultDebounce,
	// negative delivers every raw event.
	Debounce time.Duration
	// Buffer is the Events channel capacity; 0 means DefaultBuffer.
	Buffer int
	// DisableNotify runs without fsnotify: only Reconcile events, as a
	// polling design would. For baselines and benchmarks.
	DisableNotify bool
	Logger        *slog.Logger
}

// Watcher turns directory watches into typed events. Its methods are safe
// for concurrent use.
type Watcher struct {
	cfg Config
	log *slog.Logger
	fsw *fsnotify.Watcher // nil with DisableNotify
	// add adds one directory watch: fsw.Add, or a test's stand-in that
	// runs out of watches.
	add    func(string) error
	events chan Event
	reqC   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	routes atomic.Pointer[routes]
	stats  stats

	closeOnce sync.Once

	mu      sync.Mutex // guards dirs, limited and closed; held across fsnotify Add/Remove
	dirs    map[string]*dirState
	limited int  // directories not watched for the watch limit, as last reported
	over    bool // the last Set needed more watches than the limit
	closed  bool
	ticks   int // reconciles' refreshes done, for their turns (refreshAll)
}

// EventWatchLimit: the kernel's watch limit left store directories
// unwatched (or, with unwatched=0, they are all watched again).
const EventWatchLimit = "watch.limit"

// stats are read by tests to wait on what the loop has seen.
type stats struct {
	raw    atomic.Int64 // raw fsnotify events read
	writes atomic.Int64 // raw events dropped because they were only writes
	folded atomic.Int64 // events folded into a pending Reconcile (buffer full)
}

// New starts a Watcher with nothing watched; call Set.
func New(cfg Config) (*Watcher, error) {
	if cfg.Reconcile == 0 {
		cfg.Reconcile = DefaultReconcile
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = DefaultDebounce
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultBuffer
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Watcher{
		cfg:    cfg,
		log:    cfg.Logger.With("subsystem", "watcher"),
		events: make(chan Event, cfg.Buffer),
		reqC:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		dirs:   map[string]*dirState{},
	}
	w.routes.Store(&routes{})
	if !cfg.DisableNotify {
		fsw, err := fsnotify.NewWatcher()
		if err != nil {
			return nil, fmt.Errorf("start fsnotify (raise fs.inotify.max_user_instances if exhausted): %w", err)
		}
		w.fsw, w.add = fsw, fsw.Add
	}
	l := newLoop(w)
	go l.run()
	return w, nil
}

// Events delivers the typed events. It is closed when Close has stopped
// the watcher.
func (w *Watcher) Events() <-chan Event { return w.events }

// Set makes the watches match targets and homes: directories no longer
// needed are unwatched (their events stop at once), new ones are watched.
// Many targets may share a directory. A directory that does not exist yet
// is not an error: it is armed when it appears in a watched parent or at
// the next reconcile. Set returns once every existing directory is
// watched, so a caller that stats its stores afterwards misses nothing;
// the error lists directories that exist but could not be watched, which
// stay covered only by reconciles (and are retried at each).
func (w *Watcher) Set(targets []Target, homes []Home) error {
	r, err := buildRoutes(targets, homes)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	// Checked against the limit before adding any: the count alone says
	// the watches cannot all be had, whatever else the user runs.
	if lim := watchLimit(); lim > 0 && len(r.dirs) > lim != w.over {
		w.over = !w.over
		if w.over {
			w.log.Error("more directories to watch than the kernel allows this user", "event", EventWatchLimit,
				"needed", len(r.dirs), "limit", lim, "hint", limitHint)
		}
	}
	// Publish first: events for dropped directories stop matching before
	// their watches go.
	w.routes.Store(r)
	want := make(map[string]bool, len(r.dirs))
	for _, d := range r.dirs {
		want[d] = true
	}
	for d, st := range w.dirs {
		if !want[d] {
			w.disarm(d, st)
			delete(w.dirs, d)
		}
	}
	var errs []error
	failed := 0
	for _, d := range r.dirs {
		st := w.dirs[d]
		if st == nil {
			st = &dirState{}
			w.dirs[d] = st
		}
		if _, err := w.refresh(d, st, nil); err != nil {
			if failed++; failed <= maxSetErrors {
				errs = append(errs, err)
			}
		}
	}
	w.limitReport(r)
	if failed > maxSetErrors {
		errs = append(errs, fmt.Errorf("and %d more directories not watched", failed-maxSetErrors))
	}
	return errors.Join(errs...)
}

// Watched reports whether dir, one of the targets' directories, has its
// watch in place now: a change in it is an event. False without
// fsnotify (DisableNotify) and for a directory not watched (missing, out
// of watches, an error), whose changes only a reconcile sees.
func (w *Watcher) Watched(dir string) bool {
	if w.fsw == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.dirs[dir]
	return st != nil && st.watched && !w.closed
}

// HomeWatched reports whether a home's root and its profiles/ directory
// are both watched now, so a profile appearing or going is an event.
func (w *Watcher) HomeWatched(root string) bool {
	root, err := absDir(root)
	if err != nil {
		return false
	}
	return w.Watched(root) && w.Watched(filepath.Join(root, profilesDir))
}

// Reconcile asks for an immediate Reconcile event (ReasonRequested); the
// watcher re-checks its own directory watches first. Requests made while
// one is pending are folded into it.
func (w *Watcher) Reconcile() {
	select {
	case w.reqC <- struct{}{}:
	default:
	}
}

// Close stops the watcher and closes the Events channel. Cleanup always
// completes, even when ctx ends first; ctx only bounds the wait for it.
func (w *Watcher) Close(ctx context.Context) error {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		close(w.stop)
		if w.fsw != nil {
			if err := w.fsw.Close(); err != nil {
				w.log.Warn("close fsnotify", "err", err)
			}
		}
	})
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close watcher: %w", ctx.Err())
	}
}
