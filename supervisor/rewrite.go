package supervisor

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/modwatch"
	"github.com/stateguard/stateguard/store"
)

// In-place rewrites (docs/design.md §5, kind rewritten). A store's own
// SQLite connections write its main only in a checkpoint, and every one
// of them holds the store's -wal and -shm. A process that writes the
// main and holds neither (cp, rsync --inplace, dd, cat >) is rewriting
// it under the live WAL: from its first write on, a live writer that
// commits would pair the old WAL with new pages, and the next checkpoint
// or opener would corrupt the store. As root, fanotify names the writer
// of every write (package modwatch): at the first write of a process
// that is not known as a connection of the store, every holder that can
// write the generation is frozen at once from the holder cache, on the
// notification's own goroutine; then the writer is inspected, and if it
// turns out to be a SQLite connection that opened the store since the
// last scan, they are thawed. Otherwise the store's worker opens a
// rewritten incident.

// rewrites is the agent's fanotify group and which store each watched
// main belongs to.
type rewrites struct {
	mw *modwatch.Watcher // nil: no fanotify (not root, not Linux)

	mu     sync.Mutex
	byMain map[fileid.ID]*worker
}

// startRewrites starts the fanotify group; without one the agent runs
// on, detecting in-place rewrites only by what they leave behind.
func (a *Agent) startRewrites() {
	mw, err := modwatch.New(a.onModify, modwatch.Config{Log: a.opts.Logger, NoGate: a.opts.NoOpenGate})
	if err != nil {
		level := a.log.Warn
		if errors.Is(err, modwatch.ErrUnsupported) {
			level = a.log.Info
		}
		level("in-place rewrites of a live main (cp, rsync --inplace) are not caught at their first write",
			"err", err, "hint", "run agentd as root on Linux for fanotify")
		return
	}
	a.rw.mw, a.rw.byMain = mw, map[fileid.ID]*worker{}
	if !mw.Attributed() {
		a.log.Info("in-place rewrites of a live main are caught after their first write (inotify and the main's header), without the writer's pid; every live writer is frozen",
			"hint", "run agentd as root for fanotify: writer pids, and opens for writing held before the first write")
	}
}

func (a *Agent) closeRewrites() {
	if a.rw.mw != nil {
		_ = a.rw.mw.Close()
	}
}

// watchMain marks main, the main of the generation the worker has
// classified, once per inode; the previous main of the worker is no
// longer its store's (it is an old generation, whose holders the
// incidents handle). When another inode is at the path by the time it is
// marked, that one is left to the check its change kicked.
func (w *worker) watchMain(main fileid.State) {
	rw := &w.a.rw
	if rw.mw == nil || !main.Exists || main.ID == w.watched {
		return
	}
	id, err := rw.mw.Watch(w.st.Path)
	if err != nil {
		// Retried at the next check; said once per inode (a protection
		// gap, not routine).
		level := w.log.Debug
		if w.watchFailed != main.ID {
			level, w.watchFailed = w.log.Warn, main.ID
		}
		level("main not watched for in-place writes; retried at the next check", "err", err)
		return
	}
	if id != main.ID {
		if id != w.watched {
			rw.mw.Unwatch(id)
		}
		return
	}
	rw.mu.Lock()
	if old := w.watched; !old.IsZero() && rw.byMain[old] == w {
		delete(rw.byMain, old)
		rw.mw.Unwatch(old)
	}
	rw.byMain[id] = w
	rw.mu.Unlock()
	w.watched = id
	w.noteMainHeader()
}

func (w *worker) unwatchMain() {
	rw := &w.a.rw
	if rw.mw == nil || w.watched.IsZero() {
		return
	}
	// Only the worker the main is registered to removes its mark: a
	// worker that replaced this one for the same store (a re-created
	// profile directory) may watch the same inode now.
	rw.mu.Lock()
	mine := rw.byMain[w.watched] == w
	if mine {
		delete(rw.byMain, w.watched)
		rw.mw.Unwatch(w.watched)
	}
	rw.mu.Unlock()
}

// onModify runs on modwatch's goroutine for every write into a watched
// main.
func (a *Agent) onModify(ev modwatch.Event) {
	if ev.Op == modwatch.Overflow {
		a.log.Warn("write notifications lost (queue overflow); checking every store", "event", EventScanUnknown)
		for _, w := range a.allWorkers() {
			w.kick(ev.At)
		}
		return
	}
	if ev.Pid == os.Getpid() || (ev.Pid <= 0 && a.rw.mw.Attributed()) {
		return // the agent's own checkpoint, replay or restore
	}
	a.rw.mu.Lock()
	w := a.rw.byMain[ev.ID]
	a.rw.mu.Unlock()
	if w == nil {
		return
	}
	if ev.Pid <= 0 {
		w.unattributedWrite(ev)
		return
	}
	switch ev.Op {
	case modwatch.OpenWrite:
		w.gatedOpen(ev)
	case modwatch.CloseWrite:
		if w.rewriting(ev.Pid) {
			w.kick(ev.At) // its incident was waiting for it
		} else {
			w.ungate(ev.Pid, time.Time{}, "it closed the main without writing")
		}
	default:
		w.foreignWrite(ev)
	}
}

// rewriteSeen is a write into the main by a process that is not a
// connection of the store, with the writers it froze.
type rewriteSeen struct {
	writer holders.Process
	at     time.Time
	frozen map[int]frozenProc
	// confirmed: the writer was seen with the main open and no sidecar,
	// or it had cut the main short; not a connection that checkpointed.
	confirmed bool
	// cut is the WAL position at the writer's open, read by the gate
	// (nil: not gated; the incident reads it at its pins, late).
	cut *store.WALCut
	// found: a rewrite made while no agent ran, found at start
	// (whiledown_look.go).
	found *foundWhileDown
}

// rewriteState is what a worker's detection shares with modwatch's
// goroutine: the rewriters seen and not yet handed to an incident, and
// the ones an incident has.
type rewriteState struct {
	// inspecting is held while a write is looked into, from the freeze
	// to the verdict: the worker's check waits for it, so a restore's
	// next step (cp && rm of the sidecars) is never classified before
	// the rewrite that began it.
	inspecting sync.Mutex

	// mainSize is the main's size at the worker's last check or the last
	// write of a connection, whichever came last.
	mainSize atomic.Int64

	mu      sync.Mutex
	pending []rewriteSeen
	gated   map[int]gatedSeen // opens for writing held by the gate, no write yet
	active  map[int]bool      // rewriter pids of this store's incidents
	stopped map[int]bool      // the writers they froze: a write of theirs raced the rewrite
	// held: writers seen stopped before a rewriter's open returned; a
	// write of theirs reported later was made before the rewriter's.
	held map[int]bool
	// lastHdr is the main's header when it was first watched, after a
	// rewrite was handled, or after the last write explained as a
	// checkpoint (the unprivileged judge, rewrite_unpriv.go).
	lastHdr mainHeaderSeen
	vouched map[int]uint64 // pid → start ticks of connections seen writing
	// holding counts foreign opens and writes of the main being looked
	// into; ownCkpt is closed when the agent's own checkpoint in flight
	// ends (nil: none). See BeginCheckpoint.
	holding int
	ownCkpt chan struct{}
	// shm is the -shm's wal-index mark at the last two checks, newest
	// first (rewrite_shm.go).
	shm [2]shmMark
}

func (w *worker) rewriting(pid int) bool {
	w.rws.mu.Lock()
	defer w.rws.mu.Unlock()
	return w.rws.active[pid]
}

// pendRewrite hands a rewrite seen, and the writers it froze, to the
// worker's next check (openRewrites).
func (w *worker) pendRewrite(rs rewriteSeen) {
	w.rws.mu.Lock()
	defer w.rws.mu.Unlock()
	if w.rws.active == nil {
		w.rws.active = map[int]bool{}
	}
	w.rws.active[rs.writer.Pid] = true
	if w.rws.stopped == nil {
		w.rws.stopped = map[int]bool{}
	}
	for pid := range rs.frozen {
		w.rws.stopped[pid] = true
	}
	w.rws.pending = append(w.rws.pending, rs)
}

// sidecarsWent reports whether the -wal or the -shm seen at the paths
// before the writer was looked at is no longer there.
func sidecarsWent(t holders.Target, wal, shm fileid.State) bool {
	for _, f := range []struct {
		role holders.Role
		was  fileid.State
	}{{holders.RoleWAL, wal}, {holders.RoleSHM, shm}} {
		if !f.was.Exists {
			continue
		}
		if now, _ := fileid.Lstat(t.RolePath(f.role)); !now.Exists || now.ID != f.was.ID {
			return true
		}
	}
	return false
}

// racedRewrite says so when a connection writes the main while a rewrite
// of it is being handled: a checkpoint that was under way when the
// rewrite began (it is frozen within a millisecond, but pages it wrote
// after the rewriter's own land in the new content). The restored store
// may then be damaged, and only the operator's restore, run again, mends
// it; the old generation is in the incident's capture either way.
func (w *worker) racedRewrite(ev modwatch.Event) {
	w.rws.mu.Lock()
	raced := w.rws.stopped[ev.Pid] && !w.rws.held[ev.Pid]
	w.rws.mu.Unlock()
	if raced {
		w.log.Error("a connection wrote the main while it was being rewritten in place: the restored store may be damaged",
			"event", EventRewriteRaced, "pid", ev.Pid,
			"hint", "check it (agentctl doctor, PRAGMA integrity_check) and run the restore again; the old generation is in the incident's capture")
	}
}

// peekWriter reads the writer's fds. The first event of `cp` is the
// O_TRUNC of its open(2), before the new fd is in its table: until the
// main shows up among its fds (or it is gone) it is looked at again, for
// a couple of milliseconds at most. The writers are frozen meanwhile.
func peekWriter(ev modwatch.Event, ids ...fileid.ID) (holders.Peek, error) {
	ids = append(ids, ev.ID)
	deadline := time.Now().Add(2 * time.Millisecond)
	for {
		pk, err := holders.PeekFDs(ev.Pid, ids...)
		if err != nil || pk.Open[ev.ID] || !time.Now().Before(deadline) {
			return pk, err
		}
		for _, id := range ids[:len(ids)-1] {
			if pk.Open[id] {
				return pk, nil
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// freezeWriters stops every cached holder that can write the generation,
// but the writer itself and what an incident or the operator already
// has; the policy observe freezes nothing. seen is when the agent read
// the event it acts on: each stop's freeze latency is from it (the gate's
// stops come before the write that opens the incident, so a latency from
// that write's event was negative).
func (w *worker) freezeWriters(known []holders.Process, writer int, seen time.Time) map[int]frozenProc {
	frozen := map[int]frozenProc{}
	if w.a.policies(w.st.Path).For(journal.KindRewritten) == incident.PolicyObserve {
		return frozen
	}
	for i := range known {
		p := &known[i]
		if p.Pid == writer || !p.MayWrite() || !p.MaySignal() || w.owns(p.Ref()) || w.a.excluded(p) || w.restorer(p.Ref()) {
			continue
		}
		if err := w.stops.stop(p.Ref()); err == nil {
			frozen[p.Pid] = stoppedAfter(p.Ref(), seen)
			w.log.Debug("holder stopped for a write into the main", "pid", p.Pid, "writer", writer)
		}
	}
	return frozen
}

// vouch remembers a process seen to be a connection of the store, so its
// checkpoints stop being looked into; vouched checks it is still the
// same process.
func (w *worker) vouch(ref holders.ProcRef) {
	w.rws.mu.Lock()
	defer w.rws.mu.Unlock()
	if w.rws.vouched == nil || len(w.rws.vouched) > 4096 {
		w.rws.vouched = map[int]uint64{}
	}
	w.rws.vouched[ref.Pid] = ref.StartTicks
}

func (w *worker) vouched(pid int) bool {
	w.rws.mu.Lock()
	ticks, ok := w.rws.vouched[pid]
	w.rws.mu.Unlock()
	if !ok {
		return false
	}
	now, err := holders.StartTicks(pid)
	return err == nil && now == ticks
}

// connection reports whether a holder is a SQLite connection of the
// store's current generation: it holds the -wal or the -shm.
func connection(p *holders.Process) bool {
	for _, f := range p.Files {
		if f.Role != holders.RoleMain && f.Current {
			return true
		}
	}
	return false
}

// walHeaderBytes is a WAL's header: a -wal no longer than it has no frame.
const walHeaderBytes = 32

// openRewrites, on the worker, opens a rewritten incident for each
// rewrite seen since the last check, with every holder that can write
// the old generation; the other holders are bystanders. A rewrite of a
// store nobody writes is only logged: there is no live WAL to pair the
// new content with (the guard's idle checkpoint empties it).
//
// held is what the calling check has frozen itself (nil: nothing): a
// rewrite that turns out to need no freeze never thaws those, or it would
// undo the check's freeze of an orphan holder it is about to hand to an
// incident.
func (w *worker) openRewrites(held map[int]frozenProc) {
	w.rws.inspecting.Lock()
	//lint:ignore SA2001 the empty section only waits for an inspection in flight
	w.rws.inspecting.Unlock()
	w.rws.mu.Lock()
	seen := w.rws.pending
	w.rws.pending = nil
	handled := false
	if len(seen) == 0 && !w.busy() {
		handled = len(w.rws.active) > 0
		w.rws.active, w.rws.stopped, w.rws.held = nil, nil, nil
	}
	w.rws.mu.Unlock()
	if handled {
		w.noteMainHeader() // the restored content is the store's now
	}
	for _, rs := range seen {
		for pid := range held {
			if f, ok := rs.frozen[pid]; ok {
				w.stops.drop(f.ref) // the check's own claim holds it
				delete(rs.frozen, pid)
			}
		}
		w.openRewrite(rs)
	}
	w.noteSHM() // after the rewrites it judged: the baseline of the next
}

func (w *worker) openRewrite(rs rewriteSeen) {
	if !rs.confirmed {
		// A writer gone before it could be looked at may have been a
		// connection closing as the last one: its checkpoint wrote the
		// main, then it removed (or emptied) the -wal. With no -wal at
		// the path there is nothing the main could be mispaired with.
		// An empty -wal next to a -shm no checkpoint touched since the
		// last check is no checkpoint's (rewrite_shm.go): a connection
		// that read since the WAL's reset would commit on its stale cache.
		wal, err := fileid.Lstat(w.target.RolePath(holders.RoleWAL))
		if err != nil || !wal.Exists || (wal.Size <= walHeaderBytes && !w.shmUnchangedSince(rs.at)) {
			w.log.Info("a process gone before it could be looked at wrote the main; no WAL left to mispair, nothing to do",
				"pid", rs.writer.Pid)
			w.thawAll(rs.frozen, "the rewriter was gone and no WAL is left to mispair")
			return
		}
		if wal.Size <= walHeaderBytes {
			w.log.Warn("a process gone before it could be looked at wrote the main, and no checkpoint has written it since the last check: a rewrite",
				"pid", rs.writer.Pid)
		}
	}
	pids := make([]int, 0, len(rs.frozen))
	for pid := range rs.frozen {
		pids = append(pids, pid)
	}
	sr, err := w.a.cache.Targeted(w.target, pids...)
	if err != nil {
		w.log.Error("targeted holder scan failed", "event", EventScanUnknown, "err", err)
		w.thawAll(rs.frozen, "the targeted holder scan failed")
		return
	}
	policy := w.a.policies(w.st.Path).For(journal.KindRewritten)
	var writers []holders.Process
	var bystanders []holders.ProcRef
	for i := range sr.Holders {
		p := &sr.Holders[i]
		switch {
		case p.Pid == rs.writer.Pid || w.owns(p.Ref()):
			continue
		case !p.MayWrite() || !p.MaySignal() || w.a.excluded(p) || w.restorer(p.Ref()):
			bystanders = append(bystanders, p.Ref())
			continue
		case forkCopy(p):
			continue // the agent's own fds, in a child not exec'd yet
		}
		if _, done := rs.frozen[p.Pid]; !done && policy != incident.PolicyObserve {
			if err := w.stops.stop(p.Ref()); err == nil {
				rs.frozen[p.Pid] = stoppedAfter(p.Ref(), rs.at)
			}
		}
		writers = append(writers, *p)
	}
	for pid, f := range rs.frozen {
		if findPid(writers, pid) == nil {
			w.thaw(pid, f, "") // the scan shows it writing nothing of the store
			delete(rs.frozen, pid)
		}
	}
	if len(writers) == 0 {
		w.log.Warn("the main was rewritten in place while no process could write the store; nothing to freeze",
			"pid", rs.writer.Pid, "exe", rs.writer.Exe)
		return
	}
	at, after := frozenTimes(rs.frozen)
	w.claimGuardWAL(writers)
	gen := generationRecord(w.readGeneration())
	var rewriter *holders.Process
	if rs.writer.Pid > 0 {
		rewriter = &rs.writer // unprivileged detection names none
	}
	o := incident.Opening{Kind: journal.KindRewritten, Policy: policy, Orphans: writers, Frozen: at, FrozenAfter: after, At: rs.at,
		Old: gen, New: gen, Rewriter: rewriter, RewriteConfirmed: rs.confirmed, Bystanders: bystanders, Cut: rs.cut}
	if rs.found != nil {
		o.FoundLate, o.ChangedAfter, o.Evidence = true, rs.found.since, rs.found.evidence
	}
	w.engine().Open(o)
	w.stops.handOver(rs.frozen)
}
