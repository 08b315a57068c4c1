package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/watcher"
)

// Options configure an Agent. The zero value runs with the defaults on the
// stores discovered for the running user.
type Options struct {
	StateDir string // default DefaultStateDir
	// Socket is the control socket's path; default
	// <DefaultRuntimeDir>/agent.sock; "-" serves no socket.
	Socket string
	// Reconcile is the holder re-scan interval (default 10 s): each
	// re-reads the stores no event covers (coverage.go).
	Reconcile time.Duration
	// DisableNotify turns fsnotify off (the polling baseline).
	DisableNotify bool
	Discover      store.DiscoverOptions
	Policies      incident.PolicySet
	// StorePolicies overrides Policies per store path.
	StorePolicies map[string]incident.PolicySet
	// Exclude lists executable base names that are never signalled.
	Exclude []string
	// CaptureMaxBytes is the per-capture budget; 0 means free space only.
	CaptureMaxBytes int64
	Logger          *slog.Logger
	// Metrics is updated as the agent works (nil: none); MetricsListen
	// serves it on a loopback address ("" = no endpoint).
	Metrics       *Metrics
	MetricsListen string
	// Stall watches Hermes stores for hung gateways and stalled turns
	// (nil: off).
	Stall *StallWatch
	// Guard arms the prevention guard on Hermes stores in WAL mode
	// (agentd's config default is guard = true); StoreGuard overrides it
	// per store path, and is the only way to guard a generic store.
	Guard      bool
	StoreGuard map[string]bool
	// Verdict is the holder scan's rule for processes it cannot inspect
	// (holders.RuleLocks when empty); status, restore and incidents all
	// judge by it.
	Verdict holders.Rule
	// Hooks are the incident engine's test seams (nil: none).
	Hooks incident.Hooks
	// NoOpenGate catches in-place rewrites at their first write only,
	// not at their open (fanotify permission events): what the agent does
	// where the kernel has none; for measuring the difference.
	NoOpenGate bool
	// Keeper keeps copies of incidents' pins in the service manager's
	// file descriptor store (nil: pins live as long as the agent).
	Keeper *PinKeeper
	// OpenFileLimit is the open-file limit the guards' budget is taken
	// from (0: the process's RLIMIT_NOFILE; fdlimit.go). For tests.
	OpenFileLimit int
}

// Agent is the running supervisor: it owns the journal, the watcher, the
// holder cache, one worker per store and the control socket.
type Agent struct {
	opts    Options
	log     *slog.Logger
	lock    *Lock
	journal *journal.Journal
	watch   *watcher.Watcher
	rw      rewrites // fanotify on every live main (rewrite.go)
	cache   holders.Cache
	ctl     *ControlServer
	metrics *MetricsServer
	started time.Time

	// ctx bounds the agent's work (a capture, a divert, a replay): Close
	// cancels it only after every worker stopped, or when its own
	// deadline runs out. quit, closed first, stops the loops that start
	// work.
	ctx       context.Context
	cancel    context.CancelFunc
	quit      chan struct{}
	quitCtx   context.Context // canceled with quit, for the walker's waits
	quitStop  context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu      countedMutex
	workers map[string]*worker
	// wlist is workers in path order, with each one's scan target, made
	// again only after workers changed (nil): every reconcile walks
	// them all, and a fresh slice and map order each time cost every
	// scan a lookup by path per store. Read only; under mu.
	wlist    []*worker
	wtargets []holders.Target
	pending  map[string]store.Store // discovered, no files yet (pending.go)
	// problemsSaid are the discovery problems already logged; only
	// refreshStores touches it, under walkMu.
	problemsSaid map[string]bool
	resumes      map[string][]journal.Incident  // unfinished at start, until their worker exists
	startPauses  map[string]*journal.GuardPause // the pauses in force, while Start starts workers
	problems     []store.Problem
	homes        []store.Home
	// firstChecks: Start is discovering, and checks every store itself
	// once the first full scan is done (firstCheckAll); under walkMu.
	firstChecks bool
	// watchesSet: the watcher was pointed at the stores and homes once;
	// refreshStores re-points it only when they change.
	watchesSet bool

	down    downState      // the look at what happened while no agent ran (whiledown_look.go)
	intents restoreWindows // announced restores (intent.go)
	alive   aliveTicks     // liveness ticks in flight (alive.go)

	armed atomic.Int64 // stores whose guard is armed (guardSet)
	// guardBudget is how many guards the open-file limit leaves room
	// for; fdLimitSaid: guard.fdlimit was logged (fdlimit.go).
	guardBudget int64
	fdLimitSaid atomic.Bool
	shares      *guardShares // the budget's share per owner (guard_share.go)
	work        workCounters

	scanMu   sync.Mutex // one full scan at a time; guards verdicts
	verdicts map[string]holders.Verdict
	// unchanged is the coverage's buffer (coverage.go); under scanMu.
	unchanged []bool
	// statAll: the next full scan reads every store's paths; audits
	// counts the reconciles' scans (coverage.go).
	statAll      atomic.Bool
	discoverOwed atomic.Bool
	audits       atomic.Int64

	// live are the options a reload may change, swapped whole: every
	// store's hot path reads them, so they take no lock.
	live atomic.Pointer[reloadable]

	// reconcileC asks reconcileLoop for a full reconcile; cap 1, so
	// requests made while one runs fold into the next.
	reconcileC chan struct{}
	// rediscoverC asks the walker to re-run discovery only (a home's
	// profiles/ changed); cap 1, folded like reconcileC.
	rediscoverC chan struct{}
	walk        walkState  // the reconcile walker's own (walker.go)
	walkMu      sync.Mutex // one reconcile or discovery at a time; guards walk, problemsSaid, watchesSet's writer
}

// Start opens the state directory, takes the single-instance lock,
// resumes unfinished incidents and starts watching. It returns once every
// store has had its first check.
func Start(ctx context.Context, opts Options) (*Agent, error) {
	opts = opts.withDefaults()
	warnPOSIXLocks(opts.Logger)
	a := &Agent{opts: opts, log: opts.Logger.With("subsystem", "supervisor"), workers: map[string]*worker{}, started: time.Now(),
		verdicts: map[string]holders.Verdict{}, reconcileC: make(chan struct{}, 1), rediscoverC: make(chan struct{}, 1), quit: make(chan struct{})}
	a.cache.SetRule(opts.Verdict)
	if opts.Keeper != nil {
		// The service manager's copies of the pins are the agent's own.
		a.cache.SetKept(opts.Keeper.Kept)
	}
	a.guardBudget = guardBudget(opts.OpenFileLimit)
	a.shares = newGuardShares()
	a.live.Store(reloadOf(opts))
	opts.Metrics.ReconcileInterval(opts.Reconcile) // Reload does not change it
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.quitCtx, a.quitStop = context.WithCancel(context.Background())
	// Refused before the journal is created or migrated: a wrong socket
	// path must leave no state behind.
	if err := checkSocketPath(opts.Socket); err != nil {
		a.cancel()
		a.quitStop()
		return nil, err
	}
	if err := a.openState(ctx); err != nil {
		a.release()
		return nil, err
	}
	a.startRewrites()
	if err := a.startWorkers(ctx); err != nil {
		a.abort()
		return nil, err
	}
	if err := a.serve(ctx); err != nil {
		a.abort()
		return nil, err
	}
	// Counted before the loops start: the event loop adds workers (under
	// a.mu) as soon as it runs.
	started := len(a.workers)
	a.wg.Add(3)
	go a.eventLoop()
	go a.reconcileLoop()
	go a.replayLoop()
	a.wg.Add(1)
	go a.cleanPrivateCopies()
	if started == 0 {
		a.log.Warn("no session store found yet; discovery runs again at every reconcile",
			"hint", "set HERMES_HOME, or list homes / [[store]] entries in the config")
	}
	a.log.Info("agent started", "event", EventAgentStarted, "pid", os.Getpid(), "state_dir", opts.StateDir,
		"socket", opts.Socket, "stores", started, "reconcile", opts.Reconcile.String(), "notify", !opts.DisableNotify)
	return a, nil
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.StateDir == "" {
		o.StateDir = control.DefaultStateDir(os.Getenv, os.Geteuid())
	}
	if o.Socket == "" {
		o.Socket = filepath.Join(control.DefaultRuntimeDir(os.Getenv, os.Geteuid()), control.SocketFile)
	}
	if o.Reconcile <= 0 {
		o.Reconcile = watcher.DefaultReconcile
	}
	return o
}

// openState prepares the state directory, takes its lock and opens the
// journal; replay jobs a dead agent left running are queued again.
func (a *Agent) openState(ctx context.Context) error {
	if err := control.PrepareStateDir(a.opts.StateDir); err != nil {
		return err
	}
	lock, err := AcquireLock(a.opts.StateDir)
	if err != nil {
		return err
	}
	a.lock = lock
	a.journal, err = journal.Open(ctx, filepath.Join(a.opts.StateDir, journal.FileName), a.opts.Logger)
	if err != nil {
		return err
	}
	if n, err := a.journal.RequeueRunning(ctx); err != nil {
		return err
	} else if n > 0 {
		a.log.Info("replay jobs left running by a previous agent requeued", "jobs", n)
	}
	return nil
}

// startWorkers starts the watcher and one worker per store, each with the
// incidents of its store a previous agent left unfinished, and gives
// every store its first check after a full scan.
func (a *Agent) startWorkers(ctx context.Context) error {
	var err error
	a.watch, err = watcher.New(watcher.Config{Reconcile: a.opts.Reconcile, DisableNotify: a.opts.DisableNotify, Logger: a.opts.Logger})
	if err != nil {
		return fmt.Errorf("start watcher: %w", err)
	}
	// Unfinished incidents go to their store's worker before it first
	// looks at the store: a check that came first would take the frozen
	// orphan of a resumed incident for a new one, and open a second
	// incident that captures and replays the same rows again.
	unfinished, err := a.journal.Unfinished(ctx)
	if err != nil {
		return err
	}
	a.resumes = map[string][]journal.Incident{}
	open := map[string]bool{}
	for _, inc := range unfinished {
		a.resumes[inc.Store] = append(a.resumes[inc.Store], inc)
		open[inc.ID] = true
	}
	// Pins kept for incidents a previous agent finished after keeping
	// them (it stopped before the store removed them) hold inodes for
	// nothing.
	a.opts.Keeper.DropExcept(open)
	// The guard pauses in force, read once for every store started now:
	// one query instead of one per worker (each on its own goroutine,
	// whose stack SQLite grows and keeps).
	if ps, err := a.journal.ActivePauses(ctx, time.Now()); err == nil {
		a.startPauses = map[string]*journal.GuardPause{}
		for i := range ps {
			a.startPauses[ps[i].Store] = &ps[i]
		}
		defer func() {
			a.mu.Lock()
			a.startPauses = nil
			a.mu.Unlock()
		}()
	}
	a.walkMu.Lock()
	a.firstChecks = true // startAll leaves the checks to firstCheckAll
	err = a.refreshStores()
	a.firstChecks = false
	a.walkMu.Unlock()
	if err != nil {
		return err
	}
	for _, inc := range unfinished {
		if a.worker(inc.Store) == nil {
			// The store is no longer discovered; its incident still
			// needs finishing, so give it a worker of its own.
			a.addWorker(store.Store{Path: inc.Store, Profile: inc.Profile, Home: inc.Home, Kind: store.Hermes})
		}
	}
	if ps, err := a.journal.WALPositions(ctx); err == nil {
		a.loadDownPositions(ps)
	} else {
		a.log.Warn("journaled wal positions not read; an incident found at start is cut by time", "err", err)
	}
	a.fullScan()
	return a.firstCheckAll(ctx, a.allWorkers(), time.Now())
}

// firstCheckAll gives each worker its first check, after the first full
// scan (so no check needs a scan of its own) and a few at a time: one
// goroutine per store at once, each with the stack a check grows, was
// most of a 10,000-store start's memory peak.
func (a *Agent) firstCheckAll(ctx context.Context, ws []*worker, at time.Time) error {
	next := make(chan *worker)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range next {
				// A worker retired meanwhile has nothing to check.
				_ = w.do(ctx, func() { w.check(at) })
			}
		}()
	}
	var err error
	for _, w := range ws {
		if err = ctx.Err(); err != nil {
			break
		}
		next <- w
	}
	close(next)
	wg.Wait()
	return err
}

// serve opens the control socket and the metrics endpoint.
func (a *Agent) serve(ctx context.Context) error {
	var err error
	if a.opts.Socket != "-" {
		if a.ctl, err = ListenControl(a.opts.Socket, a.apiHandler(), a.opts.Logger); err != nil {
			return err
		}
	}
	if a.opts.MetricsListen != "" {
		if a.metrics, err = a.opts.Metrics.Serve(a.ctx, a.opts.MetricsListen, a.opts.Logger); err != nil {
			if a.ctl != nil {
				_ = a.ctl.Close(ctx)
			}
			return fmt.Errorf("metrics endpoint: %w", err)
		}
	}
	return nil
}

// allWorkers returns every worker in path order; the slice is shared:
// never written.
func (a *Agent) allWorkers() []*worker {
	ws, _ := a.workerList()
	return ws
}

// workerList is allWorkers and each worker's scan target, in the same
// order; both shared, never written.
func (a *Agent) workerList() ([]*worker, []holders.Target) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.wlist == nil {
		ws := make([]*worker, 0, len(a.workers))
		for _, w := range a.workers {
			ws = append(ws, w)
		}
		slices.SortFunc(ws, func(x, y *worker) int { return strings.Compare(x.st.Path, y.st.Path) })
		ts := make([]holders.Target, len(ws))
		for i, w := range ws {
			ts[i] = w.target
		}
		a.wlist, a.wtargets = ws, ts
	}
	return a.wlist, a.wtargets
}

// stopWorkers lets every worker finish its step in flight and stop,
// all at once.
func (a *Agent) stopWorkers() {
	ws := a.allWorkers()
	for _, w := range ws {
		w.stopEngine()
	}
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); w.stopAndWait() }()
	}
	wg.Wait()
}

// warnPOSIXLocks says when this process's SQLite connections use POSIX
// locks on Linux: the binary's main must call store.UseOFDLocks before
// the first SQLite open, or a close() of a raw fd on a store (the guard, a
// pin, a header read) could drop the agent's own transaction locks.
func warnPOSIXLocks(log *slog.Logger) {
	if runtime.GOOS == "linux" && !sqlite.OFDLockingEnabled() {
		log.Warn("SQLite OFD locking is off in this process (main did not call store.UseOFDLocks)", "subsystem", "supervisor")
	}
}

// Close stops the agent in the order that leaves the journal true: no
// new work starts (the watcher, the reconcile and replay loops stop; a
// replay job in flight finishes), every worker finishes the step in
// flight and journals it, starts no other, and closes its pins and guard;
// then the agent's work context is canceled and the state directory
// released. If ctx ends first, the work in flight is canceled (and
// journaled as not done) and Close returns ctx's error. Frozen holders
// stay frozen only with a journal record, which the next start resumes.
func (a *Agent) Close(ctx context.Context) error {
	var err error
	a.closeOnce.Do(func() { err = a.close(ctx) })
	return err
}

func (a *Agent) close(ctx context.Context) error {
	a.log.Info("agent stopping", "event", EventAgentStopping)
	for _, w := range a.allWorkers() {
		w.stopEngine() // the step in flight goes on; no other starts
	}
	close(a.quit)
	a.quitStop()
	var errs []error
	if a.watch != nil {
		errs = append(errs, a.watch.Close(ctx))
	}
	errs = append(errs, a.waitOrCancel(ctx, "loops", a.wg.Wait))
	errs = append(errs, a.waitOrCancel(ctx, "workers", a.stopWorkers))
	a.notePositionsAtStop()
	a.closeRewrites()
	a.cancel()
	if a.ctl != nil {
		errs = append(errs, a.ctl.Close(ctx))
	}
	if a.metrics != nil {
		errs = append(errs, a.metrics.Close(ctx))
	}
	a.release()
	return errors.Join(errs...)
}

// waitOrCancel runs wait; if ctx ends first, it cancels the agent's work
// so wait returns soon, and reports ctx's error.
func (a *Agent) waitOrCancel(ctx context.Context, what string, wait func()) error {
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		a.cancel()
		<-done
		return fmt.Errorf("agent close: %s: %w (work in flight canceled)", what, ctx.Err())
	}
}

// abort undoes a Start that failed after its workers started.
func (a *Agent) abort() {
	close(a.quit)
	a.quitStop()
	if a.watch != nil {
		_ = a.watch.Close(context.Background())
	}
	a.stopWorkers()
	a.closeRewrites()
	a.release()
}

func (a *Agent) release() {
	a.cancel()
	a.quitStop()
	if a.journal != nil {
		_ = a.journal.Close()
	}
	if a.lock != nil {
		_ = a.lock.Release()
	}
}

// Journal exposes the journal for tests and the control API.
func (a *Agent) Journal() *journal.Journal { return a.journal }

// SocketPath is the control socket's path ("" when none is served).
func (a *Agent) SocketPath() string {
	if a.ctl == nil {
		return ""
	}
	return a.ctl.Path()
}

// Reload applies the options a SIGHUP may change: policies, exclusions,
// the capture budget, the guard and the verdict rule. Paths, the socket
// and discovery stay as started.
func (a *Agent) Reload(o Options) {
	a.live.Store(reloadOf(o))
	a.cache.SetRule(o.Verdict)
	a.log.Info("configuration reloaded")
}

// reloadable are the options Reload replaces.
type reloadable struct {
	policies        incident.PolicySet
	storePolicies   map[string]incident.PolicySet
	exclude         []string
	captureMaxBytes int64
	guard           bool
	storeGuard      map[string]bool
}

func reloadOf(o Options) *reloadable {
	return &reloadable{policies: o.Policies, storePolicies: o.StorePolicies, exclude: o.Exclude,
		captureMaxBytes: o.CaptureMaxBytes, guard: o.Guard, storeGuard: o.StoreGuard}
}

// policies returns the policy set for a store.
func (a *Agent) policies(path string) incident.PolicySet {
	r := a.live.Load()
	if p, ok := r.storePolicies[path]; ok {
		return p
	}
	return r.policies
}

func (a *Agent) captureBudget() int64 { return a.live.Load().captureMaxBytes }

func (a *Agent) excluded(p *holders.Process) bool {
	if p.Pid == os.Getpid() {
		return true
	}
	base := filepath.Base(p.Exe)
	for _, e := range a.live.Load().exclude {
		if e == base {
			return true
		}
	}
	return false
}
