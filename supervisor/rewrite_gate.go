package supervisor

import (
	"context"
	"io"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/modwatch"
	"github.com/stateguard/stateguard/store"
)

// As root on a kernel with fanotify permission events, a process that
// opens a live main write-only or truncating (cp, dd, rsync --inplace,
// cat >) is held in its open(2) while gatedOpen runs (modwatch's gate):
// the store's live writers are frozen and seen stopped before the tool
// can write a byte, so no checkpoint of theirs can land in the main after
// the tool's first write (the rewrite.raced window of detection at the
// first write). The tool's first write (foreignWrite) then takes over the
// freeze; a close without any write, or none within gatedMax, thaws them.

const (
	// gateStopWait bounds the wait, from the open, for the frozen writers
	// to be seen stopped. A stopping process first finishes the system
	// call it is in, and under I/O load a checkpoint's fsync takes well
	// over 50 ms (the earlier bound): the tool was then let write while a
	// writer still ran, and its later write counted as rewrite.raced. The
	// gate lets the open through at modwatch.GateTimeout anyway, so the
	// wait uses nearly all of it.
	gateStopWait = modwatch.GateTimeout - 20*time.Millisecond
	// gatedMax is how long writers stay frozen for an open for writing
	// that writes nothing.
	gatedMax = 10 * time.Second
)

// gatedSeen is an open for writing held by the gate, with the writers it
// froze, not yet followed by a write.
type gatedSeen struct {
	at     time.Time
	frozen map[int]frozenProc
	// cut is where the live WAL's committed frames ended once the frozen
	// writers were seen stopped, before the tool's open returned (nil:
	// unread): the rewritten incident's frame cut.
	cut *store.WALCut
}

func (w *worker) gatedOpen(ev modwatch.Event) {
	if w.rewriting(ev.Pid) || w.restorer(holders.ProcRef{Pid: ev.Pid}) {
		return
	}
	if wal, _ := fileid.Lstat(w.target.RolePath(holders.RoleWAL)); !wal.Exists {
		return // no live WAL to pair the new pages with (foreignWrite)
	}
	// A connection the scan knows, or one seen writing since, is no
	// rewriter: nothing is frozen or yielded for it.
	known, _ := w.a.cache.Known(w.target)
	if p := findPid(known.Holders, ev.Pid); (p != nil && connection(p)) || w.vouched(ev.Pid) {
		return
	}
	// The hold refuses a replay that registers after its yield
	// (replayMayStart) until the tool writes (its incident) or closes.
	ownCkpt, unhold := w.holdOwnCheckpoints()
	defer unhold()
	frozen := w.freezeWriters(known.Holders, ev.Pid, ev.At)
	ctx, cancel := context.WithDeadline(context.Background(), ev.At.Add(gateStopWait))
	if ownCkpt != nil {
		// The agent's own checkpoint (a replay's) writes the main as the
		// frozen writers' would: let the tool's open wait for it too.
		select {
		case <-ownCkpt:
		case <-ctx.Done():
			w.log.Warn("an open of the live main for writing is let through while the agent's own checkpoint runs", "pid", ev.Pid)
		}
	}
	var held []int
	for pid, f := range frozen {
		if err := holders.WaitStopped(ctx, f.ref); err != nil {
			w.log.Warn("an open of the live main for writing is let through before a writer was seen stopped",
				"pid", ev.Pid, "writer", pid, "err", err)
			continue
		}
		held = append(held, pid)
	}
	cancel()
	cut := w.gateCut()
	w.rws.mu.Lock()
	if w.rws.held == nil {
		w.rws.held = map[int]bool{}
	}
	for _, pid := range held {
		w.rws.held[pid] = true
	}
	if w.rws.gated == nil {
		w.rws.gated = map[int]gatedSeen{}
	}
	if old, ok := w.rws.gated[ev.Pid]; ok {
		for pid, f := range old.frozen {
			if dup, ok := frozen[pid]; ok {
				w.stops.drop(dup.ref) // one frozenProc, one claim: the first open's stands
			}
			frozen[pid] = f
		}
		if old.cut != nil {
			cut = old.cut // the tool's first open is where the restore began
		}
	}
	w.rws.gated[ev.Pid] = gatedSeen{at: ev.At, frozen: frozen, cut: cut}
	if w.rws.stopped == nil {
		w.rws.stopped = map[int]bool{}
	}
	for pid := range frozen {
		w.rws.stopped[pid] = true
	}
	w.rws.mu.Unlock()
	w.log.Debug("an open of the live main for writing was held until its writers were frozen", "pid", ev.Pid,
		"frozen", len(frozen), "seen_stopped", len(held), "held_ms", time.Since(ev.At).Milliseconds())
	time.AfterFunc(gatedMax, func() { w.ungate(ev.Pid, ev.At, "it opened the main for writing and wrote nothing") })
}

// gateCut reads, through the directory's handle, where the store's WAL
// stands: its last committed frame. gatedOpen reads it once the writers
// it froze are seen stopped, before the tool's open returns, so it is
// exact to the commit, however long the tool took to get to its open
// (rsync forks its receiver hundreds of milliseconds after it starts under
// load) and whatever the writers checkpointed meanwhile: what was
// committed by then is what the restore overwrites; a frame after it was
// committed after the restore began (a writer the freeze missed) and is
// replayed.
//
// It runs on modwatch's goroutine, beside the store's worker, whose own
// SQLite connection (a replay's) may be open: its locks on the -shm are
// POSIX locks, which a close(2) of an fd of the -shm in the agent's file
// table would drop. So the -wal and -shm are opened, read and closed in a
// private file table (store.InPrivateFDTable).
func (w *worker) gateCut() *store.WALCut {
	var c store.WALCut
	var err error
	if perr := store.InPrivateFDTable(func() { c, err = w.readGateCut() }); perr != nil {
		err = perr
	}
	if err != nil {
		w.log.Debug("no wal position at the gate", "err", err)
		return nil
	}
	return &c
}

// readGateCut is gateCut's read, in the private file table: nothing is
// logged there (no fd of the agent's is used from it).
func (w *worker) readGateCut() (store.WALCut, error) {
	wal, err := w.st.OpenFile("-wal")
	if err != nil {
		return store.WALCut{}, err
	}
	defer wal.Close()
	var shm io.ReaderAt // a nil *os.File would be a non-nil reader
	if f, err := w.st.OpenFile("-shm"); err == nil {
		defer f.Close()
		shm = f
	}
	return store.ReadWALCut(wal, shm)
}

// takeGated returns and forgets pid's held open, if any.
func (w *worker) takeGated(pid int) (gatedSeen, bool) {
	w.rws.mu.Lock()
	defer w.rws.mu.Unlock()
	g, ok := w.rws.gated[pid]
	delete(w.rws.gated, pid)
	return g, ok
}

// ungate thaws what pid's open (the one at at) froze when no write of it
// came.
func (w *worker) ungate(pid int, at time.Time, why string) {
	w.rws.mu.Lock()
	g, ok := w.rws.gated[pid]
	if ok && (at.IsZero() || g.at.Equal(at)) {
		delete(w.rws.gated, pid)
	} else {
		ok = false
	}
	w.rws.mu.Unlock()
	if ok {
		w.releaseGated(g, why)
	}
}

// releaseGated thaws what a held open froze, which no rewrite took over.
func (w *worker) releaseGated(g gatedSeen, why string) {
	w.rws.mu.Lock()
	for pid := range g.frozen {
		delete(w.rws.held, pid)
		delete(w.rws.stopped, pid)
	}
	w.rws.mu.Unlock()
	w.thawAll(g.frozen, why)
}
