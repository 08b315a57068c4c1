package incident

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/walsalvage"
)

// Procs is what the engine does to the processes holding an orphan and
// to their files. Host is the real one; the machine's unit tests use a
// fake that holds no process at all.
type Procs interface {
	Thaw(holders.ProcRef) error
	Terminate(holders.ProcRef) error
	Kill(holders.ProcRef) error
	// Alive reports whether the process still exists (not a zombie) with
	// the same start time.
	Alive(holders.ProcRef) bool
	WaitStopped(context.Context, holders.ProcRef) error
	WaitGone(context.Context, holders.ProcRef) error
	// Pin opens a read-only fd of the agent's own on the inode the holder
	// has open (f.FD) or only mapped (f.FD < 0), checking it is f.ID.
	Pin(pid int, f holders.Held) (*os.File, error)
	// LockPin takes the guard's read lock on a pinned main or -shm, so no
	// orphan can become the last closer that checkpoints and unlinks.
	LockPin(holders.Role, *os.File) error
	// Writes reports whether the process still has the inode open for
	// writing: the rewriter of a rewritten main is left to finish.
	Writes(holders.ProcRef, fileid.ID) bool
}

// Salvage is the recovery work of the protocol: snapshots, captures,
// quarantine and divert. Recovery is the real one.
type Salvage interface {
	// Snapshot copies the main file the orphan shares with the new
	// generation from its pinned fd to dst, holding a read transaction on
	// the new generation meanwhile so no checkpoint lands in it first.
	Snapshot(ctx context.Context, dbPath string, main *os.File, dst string) error
	// FinishBackfill completes the checkpoint a frozen sidecar_lost holder
	// was stopped in the middle of, from its pinned -wal and -shm, into
	// the shared main of st, through its directory handle
	// (recovery.FinishBackfill), so
	// the snapshot and the new generation read a whole database.
	FinishBackfill(ctx context.Context, st store.Store, main, wal, shm *os.File) (recovery.BackfillReport, error)
	Stage(recovery.CaptureRequest) (string, error)
	Quarantine(dbPath, staging string, want map[string]fileid.ID) ([]string, error)
	Capture(context.Context, recovery.CaptureSource, recovery.CaptureRequest) (recovery.Capture, error)
	Divert(context.Context, recovery.DivertRequest) (recovery.DivertReport, error)
	// DivertWALImages diverts the rows of a capture whose WAL fits no
	// main (recovery.ErrCaptureUnpaired) from the WAL's page images, and
	// reports what it could not read.
	DivertWALImages(context.Context, recovery.DivertRequest) (recovery.DivertReport, *walsalvage.Report, error)
	// RemoveCapture removes a resolved incident's finished capture
	// directory of st (recovery.RemoveCapture) and returns the bytes it
	// held.
	RemoveCapture(st store.Store, dir string) (int64, error)
}

// Scanner re-inspects the processes known to hold a store (the holder
// cache's targeted scan).
type Scanner interface {
	Targeted(t holders.Target, pids ...int) (*holders.StoreResult, error)
}

// Memory is the holder cache's list of inodes to look for in every scan
// (holders.Cache): the incident's pins keep orphaned inodes alive, so a
// process that still holds one is found wherever it was renamed.
type Memory interface {
	Remember(...holders.KnownFile)
	ForgetFiles(...holders.KnownFile)
}

// Keeper keeps copies of an incident's pins outside the agent (the
// service manager's file descriptor store), so an orphan whose only
// holder is the agent survives the agent's crash or restart: the next
// agent's Resume reclaims them. The copies go when the incident no longer
// needs its pins (captured, finished); an agent that stops leaves them.
type Keeper interface {
	Keep(store, incident string, role holders.Role, f *os.File)
	// Reclaim returns the copies a previous agent kept for incident, now
	// this agent's to close; they stay in the store until Drop.
	Reclaim(incident string) []Pin
	// Drop removes the copies kept for incident, a store's, and closes
	// those reclaimed by none (a -shm's through store.CloseSHM).
	Drop(store, incident string)
}

// Metrics is what the engine reports; a nil *supervisor.Metrics is a
// valid one that does nothing.
type Metrics interface {
	IncidentOpened(kind string)
	IncidentState(kind, state string, delta int)
	ObserveFreeze(time.Duration)
	CaptureWritten(bytes int64)
	CaptureFailed()
}

// Config is the part of the agent's configuration a reload may change.
type Config struct {
	Policies        PolicySet
	CaptureMaxBytes int64 // 0: free space only
}

// Hooks are test seams, all optional. BeforeStep runs before a state's
// step; BeforeJournal before a step is written to the journal, after its
// work is done: the two points an agent can be stopped at.
type Hooks struct {
	BeforeStep    func(id string, state journal.State)
	BeforeJournal func(id string, from, to journal.State, step string)
	// InDivert runs on the divert's own goroutine before it reads
	// anything: a test holds a divert in flight with it.
	InDivert func(id string)
}

// Deps are everything an Engine works with. Journal, Procs, Salvage and
// Scan are required.
type Deps struct {
	Journal *journal.Journal
	Procs   Procs
	Salvage Salvage
	Scan    Scanner
	Memory  Memory           // nil: pins are not told to the holder cache
	Keeper  Keeper           // nil: pins die with the agent
	Metrics Metrics          // nil: none
	Config  func() Config    // nil: the defaults
	Wake    func()           // asks the owner to call Advance soon (a holder exited); nil: none
	Log     *slog.Logger     // nil: discard
	Hooks   Hooks            // test seams
	Now     func() time.Time // nil: time.Now
}

// Engine runs the incidents of one store. It is driven by one goroutine
// (the store's worker): Open, Resume, Advance, Release and Close are not
// safe for concurrent use. Busy, Owns and IDs may be called from any
// goroutine.
type Engine struct {
	st     store.Store
	target holders.Target
	d      Deps
	log    *slog.Logger

	table map[journal.State]entry

	ctx      context.Context // canceled by Close: the engine's own goroutines
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopping atomic.Bool // set by Stop: no step starts any more

	mu   sync.Mutex // guards live for readers outside the worker
	live map[string]*live
}

// New returns the engine of store st. ctx bounds the work of its steps
// (a capture, a divert): canceling it aborts them, and what they had not
// finished is journaled as not done. Journal writes outlive it.
func New(ctx context.Context, st store.Store, d Deps) *Engine {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Config == nil {
		d.Config = func() Config { return Config{} }
	}
	if d.Metrics == nil {
		d.Metrics = noMetrics{}
	}
	e := &Engine{st: st, target: holders.Target{Path: st.Path, Dir: holders.DirRecord{ID: st.DirID.ID, UID: st.DirID.UID}}, d: d, table: newTable(),
		log: d.Log.With("subsystem", "incident", "store", st.Path, "profile", st.Profile), live: map[string]*live{}}
	e.ctx, e.cancel = context.WithCancel(ctx)
	return e
}

type noMetrics struct{}

func (noMetrics) IncidentOpened(string)             {}
func (noMetrics) IncidentState(string, string, int) {}
func (noMetrics) ObserveFreeze(time.Duration)       {}
func (noMetrics) CaptureWritten(int64)              {}
func (noMetrics) CaptureFailed()                    {}

// Busy reports whether the store has an unfinished incident.
func (e *Engine) Busy() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.live) > 0
}

// IDs lists the unfinished incidents, sorted.
func (e *Engine) IDs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := make([]string, 0, len(e.live))
	for id := range e.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Owns reports whether an unfinished incident already handles ref.
func (e *Engine) Owns(ref holders.ProcRef) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, li := range e.live {
		if li.holds(ref) {
			return true
		}
	}
	return false
}

// Stop makes the engine start no further step; the one in flight
// finishes and is journaled. Safe from any goroutine: the agent calls it
// first when it shuts down, so its worker stops at a step boundary.
func (e *Engine) Stop() { e.stopping.Store(true) }

// Close stops the engine's goroutines and closes every pinned fd. It runs
// on the worker, after the last step: the journal already says where each
// incident stands, and the next agent resumes from there.
func (e *Engine) Close() {
	e.cancel()
	e.wg.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, li := range e.live {
		// The kept copies stay: the next agent resumes with them.
		e.closePins(li)
	}
}

// pinned records a new pin of li and tells the holder cache to look for
// its inode.
func (e *Engine) pinned(li *live, p *pin) {
	if p.birth == 0 && p.f != nil {
		p.birth = holders.FileBirth(p.f)
	}
	li.pins = append(li.pins, p)
	if e.d.Memory != nil {
		e.d.Memory.Remember(p.known(e.st.Path))
	}
	if li.id != "" {
		e.keep(li, p)
	}
}

// keep hands a copy of p to the Keeper. Open keeps its pins once the
// journal has given the incident its id.
func (e *Engine) keep(li *live, p *pin) {
	if e.d.Keeper != nil && p.f != nil {
		e.d.Keeper.Keep(e.st.Path, li.id, p.role, p.f)
	}
}

// reclaim adopts the pins a previous agent kept for li (Keeper) that li
// does not hold already.
func (e *Engine) reclaim(li *live) {
	if e.d.Keeper == nil {
		return
	}
	for _, p := range e.d.Keeper.Reclaim(li.id) {
		if li.pinOf(p.Role) != nil {
			closeAs(e.st.Path, p.Role, p.File)
			continue
		}
		np := &pin{role: p.Role, id: p.ID, f: p.File, birth: holders.FileBirth(p.File)}
		li.pins = append(li.pins, np)
		if e.d.Memory != nil {
			e.d.Memory.Remember(np.known(e.st.Path))
		}
		e.log.Info("orphan inode pinned again from the copy a previous agent kept", "incident", li.id,
			"role", string(p.Role), "id", p.ID.String())
	}
}

// unpin closes li's pins, takes their inodes off the holder cache's list
// and drops the copies kept for it: the incident needs them no more.
func (e *Engine) unpin(li *live) {
	e.closePins(li)
	if e.d.Keeper != nil && li.id != "" {
		e.d.Keeper.Drop(e.st.Path, li.id)
	}
}

func (e *Engine) closePins(li *live) {
	if e.d.Memory != nil {
		for _, p := range li.pins {
			e.d.Memory.ForgetFiles(p.known(e.st.Path))
		}
	}
	li.closePins(e.st.Path)
}

func (e *Engine) add(li *live) {
	e.mu.Lock()
	e.live[li.id] = li
	e.mu.Unlock()
}

func (e *Engine) forget(li *live) {
	e.mu.Lock()
	delete(e.live, li.id)
	e.mu.Unlock()
}

func (e *Engine) all() []*live {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*live, 0, len(e.live))
	for _, li := range e.live {
		out = append(out, li)
	}
	slices.SortFunc(out, func(a, b *live) int {
		if a.id < b.id {
			return -1
		}
		if a.id > b.id {
			return 1
		}
		return 0
	})
	return out
}

func (e *Engine) policies() PolicySet { return e.d.Config().Policies }

// wakeIn wakes the owner after d, for a step waiting on a short quiet.
func (e *Engine) wakeIn(d time.Duration) {
	if e.d.Wake == nil {
		return
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-e.ctx.Done():
		case <-t.C:
			e.d.Wake()
		}
	}()
}

// watchExit wakes the owner when a holder exits, so the capture starts at
// once rather than at the next tick.
func (e *Engine) watchExit(ref holders.ProcRef) {
	if e.d.Wake == nil {
		return
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		_ = e.d.Procs.WaitGone(e.ctx, ref)
		if e.ctx.Err() == nil {
			e.d.Wake()
		}
	}()
}
