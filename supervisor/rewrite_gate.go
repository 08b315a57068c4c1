package supervisor

import (
	"context"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/modwatch"
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
	// gateStopWait bounds the wait for the frozen writers to be seen
	// stopped (a stopping process finishes the system call it is in).
	gateStopWait = 50 * time.Millisecond
	// gatedMax is how long writers stay frozen for an open for writing
	// that writes nothing.
	gatedMax = 10 * time.Second
)

// gatedSeen is an open for writing held by the gate, with the writers it
// froze, not yet followed by a write.
type gatedSeen struct {
	at     time.Time
	frozen map[int]frozenProc
}

func (w *worker) gatedOpen(ev modwatch.Event) {
	if w.rewriting(ev.Pid) || w.restorer(holders.ProcRef{Pid: ev.Pid}) {
		return
	}
	if wal, _ := fileid.Lstat(w.target.RolePath(holders.RoleWAL)); !wal.Exists {
		return // no live WAL to pair the new pages with (foreignWrite)
	}
	known, _ := w.a.cache.Known(w.target)
	if p := findPid(known.Holders, ev.Pid); p != nil && connection(p) {
		return
	}
	frozen := w.freezeWriters(known.Holders, ev.Pid)
	ctx, cancel := context.WithTimeout(context.Background(), gateStopWait)
	var held []int
	for pid, f := range frozen {
		if holders.WaitStopped(ctx, f.ref) == nil {
			held = append(held, pid)
		}
	}
	cancel()
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
			frozen[pid] = f
		}
	}
	w.rws.gated[ev.Pid] = gatedSeen{at: ev.At, frozen: frozen}
	if w.rws.stopped == nil {
		w.rws.stopped = map[int]bool{}
	}
	for pid := range frozen {
		w.rws.stopped[pid] = true
	}
	w.rws.mu.Unlock()
	w.log.Debug("an open of the live main for writing was held until its writers were frozen", "pid", ev.Pid, "frozen", len(frozen))
	time.AfterFunc(gatedMax, func() { w.ungate(ev.Pid, ev.At, "it opened the main for writing and wrote nothing") })
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
