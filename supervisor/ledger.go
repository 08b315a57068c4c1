package supervisor

import (
	"errors"
	"sync"

	"github.com/stateguard/stateguard/holders"
)

// The stop ledger: one per store's worker, the one owner of every SIGSTOP
// the agent sends a process of the store, from the signal until it is
// thawed or an incident takes the process (docs/design.md §5, "Who owns a
// stopped process"). Stops start on several goroutines (the fast freeze on
// a kicker's, the lock pass on its own, the gate and a rewrite on
// modwatch's, the check on the worker) and the frozenProc values they make
// move between maps (the early set, a held open, a pending rewrite, a
// check's set) before an incident owns the process. SIGSTOP does not
// count: one SIGCONT undoes every stop. So each stop is a claim here, and
// every frozenProc in any of those maps stands for one: a thaw sends
// SIGCONT only when it gives back the last claim and no incident owns the
// process, so no path thaws a process another path still holds stopped; a
// path that lets go of a frozenProc without a thaw (another map or an
// incident has the process) gives its claim back with drop. When the
// worker ends, close thaws what no incident owns and refuses any later
// stop, so no path leaves a process stopped without an incident.
type stopLedger struct {
	mu     sync.Mutex
	closed bool
	procs  map[int]*stopClaims
}

// stopClaims is how many frozenProc values hold one process stopped.
type stopClaims struct {
	ref holders.ProcRef
	n   int
}

// errLedgerClosed refuses a stop once the store's worker has ended:
// nobody would confirm or thaw it.
var errLedgerClosed = errors.New("the store's worker has stopped: nothing is stopped any more")

// stop sends SIGSTOP to ref and records the claim. The signal is sent
// under the lock, so a concurrent last release cannot thaw the process
// between this stop and its claim.
func (l *stopLedger) stop(ref holders.ProcRef) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errLedgerClosed
	}
	if err := holders.Freeze(ref); err != nil {
		return err
	}
	c := l.procs[ref.Pid]
	if c == nil || c.ref != ref {
		// A claim on a pid whose process is gone belongs to nobody now.
		c = &stopClaims{ref: ref}
		if l.procs == nil {
			l.procs = map[int]*stopClaims{}
		}
		l.procs[ref.Pid] = c
	}
	c.n++
	return nil
}

// release gives back one claim on ref and, when it was the last one and
// owned (the incident engine's Owns) says no incident has the process,
// thaws it. It reports whether it sent SIGCONT; err is the thaw's.
func (l *stopLedger) release(ref holders.ProcRef, owned func(holders.ProcRef) bool) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.take(ref) || owned(ref) {
		return false, nil
	}
	return true, holders.Thaw(ref)
}

// drop gives back one claim on ref without a thaw: the caller hands the
// process to another claim or to an incident.
func (l *stopLedger) drop(ref holders.ProcRef) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.take(ref)
}

// take removes one claim and reports whether it was the last; with mu.
func (l *stopLedger) take(ref holders.ProcRef) bool {
	c := l.procs[ref.Pid]
	if c == nil || c.ref != ref {
		return false // not stopped by this ledger, or already given back
	}
	if c.n--; c.n > 0 {
		return false
	}
	delete(l.procs, ref.Pid)
	return true
}

// handOver gives the claims of frozen to the incident just opened with
// them: the engine owns those processes now, and thaws or kills them by
// its policy.
func (l *stopLedger) handOver(frozen map[int]frozenProc) {
	for _, f := range frozen {
		l.drop(f.ref)
	}
}

// close refuses every later stop and thaws what is still claimed and not
// owned by an incident; it returns the processes it thawed.
func (l *stopLedger) close(owned func(holders.ProcRef) bool) []holders.ProcRef {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	var out []holders.ProcRef
	for pid, c := range l.procs {
		delete(l.procs, pid)
		if owned(c.ref) {
			continue
		}
		if err := holders.Thaw(c.ref); err == nil {
			out = append(out, c.ref)
		}
	}
	return out
}

// claims is how many claims hold pid stopped (tests).
func (l *stopLedger) claims(pid int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.procs[pid]; c != nil {
		return c.n
	}
	return 0
}
