package incident

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/walsalvage"
)

// The machine's tests run the engine against a real journal and fakes of
// everything else: processes that exist only as entries in a table, pins
// that are plain files in a temp dir, captures and diverts that write
// directories and report what was asked of them. No process is started,
// none is signalled.

// fakeProc is one process of the fake host.
type fakeProc struct {
	ref   holders.ProcRef
	state byte // 'T' stopped, 'R' running, 'X' gone
	files []holders.Held
	// exitOnTerm: SIGTERM makes it exit (a well-behaved writer); else it
	// ignores SIGTERM and only SIGKILL ends it.
	exitOnTerm bool
	// readOnly: every fd it has on the store is read-only.
	readOnly bool
	gone     chan struct{}
}

type fakeProcs struct {
	mu      sync.Mutex
	procs   map[int]*fakeProc
	paths   map[fileid.ID]string // what each pinnable inode is, as a file
	signals []string             // "kill 101", "term 101", "thaw 101"
	pinErr  map[fileid.ID]error
	writing map[int]bool // pids that still write the inode they are asked about
	// unseen pids live but a targeted scan does not show them holding
	// the store (a fresh agent's scan without the orphan's history).
	unseen map[int]bool
}

func newFakeProcs() *fakeProcs {
	return &fakeProcs{procs: map[int]*fakeProc{}, paths: map[fileid.ID]string{}, pinErr: map[fileid.ID]error{}, writing: map[int]bool{}}
}

func (f *fakeProcs) add(p *fakeProc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p.gone = make(chan struct{})
	f.procs[p.ref.Pid] = p
}

func (f *fakeProcs) get(r holders.ProcRef) *fakeProc {
	p := f.procs[r.Pid]
	if p == nil || p.ref != r || p.state == 'X' {
		return nil
	}
	return p
}

func (f *fakeProcs) exit(pid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.procs[pid]; p != nil && p.state != 'X' {
		p.state = 'X'
		close(p.gone)
	}
}

func (f *fakeProcs) signal(what string, r holders.ProcRef, apply func(*fakeProc)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signals = append(f.signals, fmt.Sprintf("%s %d", what, r.Pid))
	p := f.get(r)
	if p == nil {
		return holders.ErrProcessGone
	}
	apply(p)
	if p.state == 'X' {
		close(p.gone)
	}
	return nil
}

func (f *fakeProcs) Thaw(r holders.ProcRef) error {
	return f.signal("thaw", r, func(p *fakeProc) { p.state = 'R' })
}

func (f *fakeProcs) Terminate(r holders.ProcRef) error {
	return f.signal("term", r, func(p *fakeProc) {
		if p.exitOnTerm {
			p.state = 'X'
		}
	})
}

func (f *fakeProcs) Kill(r holders.ProcRef) error {
	return f.signal("kill", r, func(p *fakeProc) { p.state = 'X' })
}

func (f *fakeProcs) Alive(r holders.ProcRef) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.get(r) != nil
}

func (f *fakeProcs) WaitStopped(_ context.Context, r holders.ProcRef) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch p := f.get(r); {
	case p == nil:
		return holders.ErrProcessGone
	case p.state != 'T':
		return errors.New("not stopped")
	}
	return nil
}

func (f *fakeProcs) WaitGone(ctx context.Context, r holders.ProcRef) error {
	f.mu.Lock()
	p := f.procs[r.Pid]
	f.mu.Unlock()
	if p == nil {
		return holders.ErrProcessGone
	}
	select {
	case <-p.gone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeProcs) Pin(pid int, h holders.Held) (*os.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.procs[pid]; p == nil || p.state == 'X' {
		return nil, holders.ErrProcessGone
	}
	if err := f.pinErr[h.ID]; err != nil {
		return nil, err
	}
	return os.Open(f.paths[h.ID])
}

func (f *fakeProcs) LockPin(holders.Role, *os.File) error { return nil }

func (f *fakeProcs) Targeted(t holders.Target, _ ...int) (*holders.StoreResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sr := &holders.StoreResult{Target: t, Verdict: holders.VerdictHeld}
	for _, p := range f.procs {
		if p.state != 'X' && !f.unseen[p.ref.Pid] {
			sr.Holders = append(sr.Holders, holders.Process{Pid: p.ref.Pid, StartTicks: p.ref.StartTicks, Exe: "/usr/bin/writer", Files: p.files})
		}
	}
	return sr, nil
}

// stopped lists the processes still stopped.
func (f *fakeProcs) stopped() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for pid, p := range f.procs {
		if p.state == 'T' {
			out = append(out, pid)
		}
	}
	return out
}

func (f *fakeProcs) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.signals...)
}

// fakeSalvage does the recovery work on plain directories. failCapture
// and failDivert make the next that many calls fail.
type fakeSalvage struct {
	mu          sync.Mutex
	dir         string
	failCapture int
	failDivert  int
	failSnap    int
	// unpaired: every capture's WAL fits no main; failSalvage: and its
	// page images cannot be read either.
	unpaired, failSalvage bool
	captures              []string // phase of every capture written, in order
	removed               []string // captures RemoveCapture removed
	n                     int
	cuts                  map[string]time.Time // the ReplacedAt of each incident's first divert
	diverts               []recovery.DivertRequest
}

var errFull = fmt.Errorf("capture of state.db: %w", recovery.ErrNoSpace)

func (s *fakeSalvage) Snapshot(_ context.Context, _ string, main *os.File, dst string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failSnap > 0 {
		s.failSnap--
		return errFull
	}
	return os.WriteFile(dst, []byte("snapshot of "+main.Name()), 0o600)
}

func (f *fakeProcs) Writes(r holders.ProcRef, _ fileid.ID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writing[r.Pid]
}

func (s *fakeSalvage) FinishBackfill(context.Context, store.Store, *os.File, *os.File, *os.File) (recovery.BackfillReport, error) {
	return recovery.BackfillReport{}, nil
}

func (s *fakeSalvage) RemoveCapture(_ store.Store, dir string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removed = append(s.removed, dir)
	return 4096, os.RemoveAll(dir)
}

func (s *fakeSalvage) Stage(r recovery.CaptureRequest) (string, error) {
	d := filepath.Join(s.dir, "staging-"+r.IncidentID+".partial")
	return d, os.MkdirAll(d, 0o700)
}

func (s *fakeSalvage) Quarantine(_, staging string, want map[string]fileid.ID) ([]string, error) {
	var moved []string
	for suffix := range want {
		moved = append(moved, filepath.Join(staging, "state.db"+suffix))
	}
	return moved, nil
}

func (s *fakeSalvage) Capture(_ context.Context, src recovery.CaptureSource, r recovery.CaptureRequest) (recovery.Capture, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failCapture > 0 {
		s.failCapture--
		return recovery.Capture{}, errFull
	}
	if src.WAL == nil && src.Main == nil && src.MainSnapshot == "" && r.Staging == "" {
		return recovery.Capture{}, errors.New("capture: nothing to copy")
	}
	s.n++
	d := filepath.Join(s.dir, fmt.Sprintf("capture-%s-%d", r.IncidentID, s.n))
	s.captures = append(s.captures, d)
	return recovery.Capture{Dir: d, Bytes: 4096}, os.MkdirAll(d, 0o700)
}

func (s *fakeSalvage) Divert(_ context.Context, r recovery.DivertRequest) (recovery.DivertReport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.diverts = append(s.diverts, r)
	if s.failDivert > 0 {
		s.failDivert--
		return recovery.DivertReport{}, errors.New("divert: healthy store busy")
	}
	if s.unpaired {
		return recovery.DivertReport{}, fmt.Errorf("%w: %s: database disk image is malformed", recovery.ErrCaptureUnpaired, r.Capture)
	}
	// recovery.Divert refuses to divert an incident again with another cut.
	if s.cuts == nil {
		s.cuts = map[string]time.Time{}
	}
	if cut, ok := s.cuts[r.IncidentID]; ok && !cut.Equal(r.ReplacedAt) {
		return recovery.DivertReport{}, fmt.Errorf("incident already diverted differently: cut %v, asked %v", cut, r.ReplacedAt)
	}
	s.cuts[r.IncidentID] = r.ReplacedAt
	dir := filepath.Join(r.ProfileHome, "sessions", "recovered", r.IncidentID)
	f := recovery.DivertFile{Path: filepath.Join(dir, "s1.jsonl"), SessionID: "s1", Rows: 3}
	return recovery.DivertReport{Dir: dir, Sessions: 1, ReplayRows: 3, Files: []recovery.DivertFile{f}}, nil
}

func (s *fakeSalvage) DivertWALImages(_ context.Context, r recovery.DivertRequest) (recovery.DivertReport, *walsalvage.Report, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rep := &walsalvage.Report{Frames: 9, FramesCommitted: 8, Pages: 4,
		Rows: walsalvage.TableCounts{Messages: 3}, Unrecoverable: walsalvage.TableCounts{Messages: 1}, SessionsSeen: []string{"s1"}}
	if s.failSalvage {
		return recovery.DivertReport{}, nil, fmt.Errorf("salvage %s: not a WAL", r.Capture)
	}
	dir := filepath.Join(r.ProfileHome, "sessions", "recovered", r.IncidentID)
	f := recovery.DivertFile{Path: filepath.Join(dir, "s1.jsonl"), SessionID: "s1", Rows: 3}
	return recovery.DivertReport{Dir: dir, Sessions: 1, ReplayRows: 3, Files: []recovery.DivertFile{f}}, rep, nil
}

// rig is one store with a journal, a fake host and a fake clock.
type rig struct {
	t     *testing.T
	dir   string
	st    store.Store
	j     *journal.Journal
	procs *fakeProcs
	salv  *fakeSalvage
	now   time.Time
	hooks Hooks
	pol   PolicySet
	eng   *Engine
	woken atomic.Bool // the engine asked for an Advance (Deps.Wake)
}

func newRig(t *testing.T, kind store.Kind) *rig {
	t.Helper()
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	if err := os.WriteFile(db, []byte("main"), 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(context.Background(), filepath.Join(dir, "journal.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	r := &rig{t: t, dir: dir, st: store.Store{Path: db, Profile: "default", Home: dir, Kind: kind}, j: j,
		procs: newFakeProcs(), salv: &fakeSalvage{dir: dir}, now: time.Unix(1_800_000_000, 0)}
	r.start()
	return r
}

// start makes a new engine on the rig's journal, as a restarted agent.
func (r *rig) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.t.Cleanup(cancel)
	r.eng = New(ctx, r.st, Deps{Journal: r.j, Procs: r.procs, Salvage: r.salv, Scan: r.procs,
		Config: func() Config { return Config{Policies: r.pol} },
		Now:    func() time.Time { return r.now }, Hooks: r.hooks, Wake: func() { r.woken.Store(true) }})
	r.t.Cleanup(r.eng.Close)
}

// writer adds a process holding the orphan's main, -wal and -shm as
// files of the temp dir; stopped says the detection froze it.
func (r *rig) writer(pid int, stopped, exitOnTerm bool) *fakeProc {
	p := &fakeProc{ref: holders.ProcRef{Pid: pid, StartTicks: uint64(pid) * 7}, state: 'R', exitOnTerm: exitOnTerm}
	if stopped {
		p.state = 'T'
	}
	for i, role := range holders.Roles {
		id := fileid.ID{Dev: 1, Ino: uint64(pid*10 + i)}
		path := filepath.Join(r.dir, fmt.Sprintf("orphan-%d%s", pid, role.Suffix()))
		if err := os.WriteFile(path, []byte(string(role)), 0o600); err != nil {
			r.t.Fatal(err)
		}
		r.procs.paths[id] = path
		p.files = append(p.files, holders.Held{Role: role, FD: 3 + i, ID: id, Current: role != holders.RoleMain})
	}
	r.procs.add(p)
	return p
}

// reader adds a process that holds the orphan's main read-only, running.
func (r *rig) reader(pid int) *fakeProc {
	p := r.writer(pid, false, false)
	p.readOnly = true
	p.files = p.files[:1]
	return p
}

// open opens an incident of kind for the given holders.
func (r *rig) open(kind journal.Kind, policy Policy, ps ...*fakeProc) string {
	r.t.Helper()
	o := Opening{Kind: kind, Policy: policy, Frozen: map[int]time.Time{}, At: r.now}
	for _, p := range ps {
		hp := holders.Process{Pid: p.ref.Pid, StartTicks: p.ref.StartTicks, Exe: "/usr/bin/writer", Files: p.files}
		if p.readOnly {
			hp.Access = holders.AccessRead
		}
		o.Orphans = append(o.Orphans, hp)
		if p.state == 'T' {
			o.Frozen[p.ref.Pid] = r.now
		}
	}
	r.eng.Open(o)
	ids := r.eng.IDs()
	if len(ids) == 0 {
		incs, _ := r.j.ListIncidents(context.Background(), journal.ListOptions{})
		if len(incs) == 0 {
			r.t.Fatal("no incident opened")
		}
		return incs[len(incs)-1].ID
	}
	return ids[len(ids)-1]
}

func (r *rig) incident(id string) journal.Incident {
	r.t.Helper()
	r.drain()
	inc, err := r.j.GetIncident(context.Background(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	return inc
}

// runJobs does what the replay queue does: runs every runnable job of the
// store (successfully unless fail) and wakes the engine.
func (r *rig) runJobs(fail bool) int {
	r.drain()
	ctx := context.Background()
	n := 0
	for {
		job, ok, err := r.j.ClaimNextJob(ctx, r.now)
		if err != nil {
			r.t.Fatal(err)
		}
		if !ok {
			break
		}
		n++
		if fail {
			_, err = r.j.FailJob(ctx, job.ID, r.now, fmt.Errorf("%w: replay refused", journal.ErrNoRetry), journal.Backoff{})
		} else {
			_, err = r.j.FinishJob(ctx, job.ID, journal.JobResult{Appended: 3})
		}
		if err != nil {
			r.t.Fatal(err)
		}
	}
	r.eng.Advance()
	r.drain()
	return n
}

// drain is what the worker does when a divert's goroutine wakes it: it
// waits for every divert in flight and advances, until none is left, so
// the machine's tests step through the states as before.
func (r *rig) drain() {
	for range 100 {
		if r.eng.stopping.Load() {
			return
		}
		var busy []*divertRun
		for _, li := range r.eng.all() {
			if li.diverting != nil {
				busy = append(busy, li.diverting)
			}
		}
		if len(busy) == 0 {
			if !r.woken.Swap(false) {
				return
			}
			r.eng.Advance()
			continue
		}
		for _, d := range busy {
			<-d.done
		}
		r.eng.Advance()
	}
	r.t.Fatal("diverts kept starting")
}

// settle advances the clock and the engine until id is over (or the
// bound is reached), running replay jobs as they are queued.
func (r *rig) settle(id string) journal.Incident {
	r.t.Helper()
	for range 200 {
		if inc := r.incident(id); inc.State.Terminal() {
			return inc
		}
		r.now = r.now.Add(10 * time.Second)
		r.eng.Advance()
		r.runJobs(false)
	}
	inc := r.incident(id)
	r.t.Fatalf("incident %s not over: %s (%s)", id, inc.State, inc.Detail.Error)
	return inc
}

// transitions lists the state changes the journal recorded for id.
func (r *rig) transitions(id string) [][2]journal.State {
	r.t.Helper()
	steps, err := r.j.Steps(context.Background(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	var out [][2]journal.State
	for _, s := range steps {
		if s.To != "" {
			out = append(out, [2]journal.State{s.From, s.To})
		}
	}
	return out
}

// incidents lists every incident of the rig's journal.
func (r *rig) incidents() []journal.Incident {
	r.t.Helper()
	incs, err := r.j.ListIncidents(context.Background(), journal.ListOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	return incs
}

// hasStep reports whether incident id's journal has a step named name.
func (r *rig) hasStep(id, name string) bool {
	r.t.Helper()
	steps, err := r.j.Steps(context.Background(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, s := range steps {
		if s.Name == name {
			return true
		}
	}
	return false
}
