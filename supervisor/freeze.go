package supervisor

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/store"
)

// fastFreeze stops, from the holder cache alone, every process the last
// scan saw able to write one of the store's files that is no longer at
// its path and that still holds it now (one stat per fd: the cache is
// older than the change, and SQLite's own last closer has closed its -wal
// before it unlinks it); the targeted re-scan confirms or thaws
// afterwards. A process that only reads the store is never stopped, nor
// one that is closing the store as its last connection.
//
// What counts as gone is decided in one place, fastStale, against the
// generation the cache entry was read with and one read after it. gen,
// the caller's read, only picks the candidates. seen is when the agent
// read the event the caller acts on (zero: not known), each stop's
// freeze latency is from it.
func (w *worker) fastFreeze(gen store.Generation, frozen map[int]frozenProc, seen time.Time) {
	known, ok := w.a.cache.Known(w.target)
	if !ok {
		return
	}
	pol := w.a.policies(w.st.Path)
	closer := -1 // not asked yet
	fresh := false
	for i := range known.Holders {
		p := &known.Holders[i]
		if _, done := frozen[p.Pid]; done || !p.MayWrite() || !p.MaySignal() || len(fastStale(p, gen)) == 0 || w.owns(p.Ref()) || w.a.excluded(p) || w.restorer(p.Ref()) {
			continue
		}
		if !fresh {
			// gen may predate the cache entry: a writer creating its
			// store makes -wal, then -shm, and a scan between gen's read
			// and now saw a sidecar gen has not. Judge against the paths
			// as they are after the entry was loaded, and only if they
			// could be read: a read the directory refused (changed since
			// discovery, or gone) returns none of the store's files,
			// which says nothing of what the holders hold.
			var read bool
			if gen, read = w.readGenerationChecked(); !read {
				return
			}
			fresh = true
		}
		stale := fastStale(p, gen)
		if len(stale) == 0 || pol.For(guessKind(p, gen)) == incident.PolicyObserve {
			continue
		}
		// Who closes the store is asked before whether p still holds
		// what is gone, in the reverse of the order SQLite's last closer
		// does them (lock the main EXCLUSIVE, unlink and close the -shm,
		// close and unlink the -wal, unlock): a closer not seen holding
		// the lock now (after gen showed its unlink) has unlocked, so has
		// closed its -shm before StillHolds looks. Asked the other way
		// round, a closer that unlocked between the two was stopped
		// (TestCleanCloseIsNeverStopped, 2 runs in 50 under load:
		// "stale=shm ... fd 7 mapped true", closer=0).
		if closer < 0 {
			closer = closingPid(w.st, gen)
		}
		if isCloser(p, gen, closer) || !stillHoldsAny(p, stale) {
			continue
		}
		if err := w.stops.stop(p.Ref()); err == nil {
			frozen[p.Pid] = stoppedAfter(p.Ref(), seen)
			w.log.Debug("holder stopped by the fast freeze; the confirming scan keeps or thaws it", "pid", p.Pid, "closer", closer,
				"stale", describeHeld(stale), "main", gen.Main.ID.String(), "wal", gen.WAL.ID.String(), "shm", gen.SHM.ID.String())
		}
	}
}

// fastStale lists the files of a cached holder the fast freeze may act
// on: those at none of the store's paths in g, a generation read after
// the cache entry through the directory discovery recorded. An inode now
// at one of the store's paths, under whatever role, is not stale: a store
// created right after another was closed gets the unlinked -shm's number
// for its main (b553132).
//
// A file the scan that filled the entry already saw off its path counts
// too: limiting the judgement to the files that scan saw at their paths
// (Held.Current) let a writer go on committing into an orphan after a
// rewrite, whose targeted scans had refreshed the entry
// (TestRewriteCutFromToolStart, now TestRewriteCutAtToolOpen, lost rows, 2 runs in 5).
func fastStale(p *holders.Process, g store.Generation) []holders.Held {
	var out []holders.Held
	for _, f := range p.Files {
		if isCurrent(g, f.ID) {
			continue
		}
		if cur := fileOf(g, f.Role); !cur.Exists || cur.ID != f.ID {
			out = append(out, f)
		}
	}
	return out
}

// stillHoldsAny reports whether p still holds, now, one of the files
// fastStale found.
func stillHoldsAny(p *holders.Process, stale []holders.Held) bool {
	for _, f := range stale {
		if holders.StillHolds(p, f.ID) {
			return true
		}
	}
	return false
}

// describeHeld says which cached files made the fast freeze stop a
// holder (role, inode, fd, mapped), for the debug log.
func describeHeld(fs []holders.Held) string {
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%s %v fd %d mapped %v", f.Role, f.ID, f.FD, f.Mapped))
	}
	return strings.Join(out, "; ")
}

// isCurrent reports whether id is at one of the store's three paths in g.
func isCurrent(g store.Generation, id fileid.ID) bool {
	for _, c := range []fileid.State{g.Main, g.WAL, g.SHM} {
		if c.Exists && c.ID == id {
			return true
		}
	}
	return false
}

// closingPid is the pid of a process holding the store's main (the one
// in g) EXCLUSIVE, 0 when none does or the main cannot be reached safely.
// It runs in the fast freeze's path, inside a directory a user owns: the
// main is opened from the profile directory's handle (no symlink in any
// component, the directory discovery recorded), never by its name, and
// must be the inode in g.
func closingPid(s store.Store, g store.Generation) int {
	if !g.Main.Exists || !g.Main.Regular() {
		return 0
	}
	h, err := s.OpenDir()
	if err != nil {
		return 0
	}
	defer h.Close()
	f, err := h.OpenFile(filepath.Base(s.Path))
	if err != nil {
		return 0
	}
	defer f.Close() // the agent's SQLite uses OFD locks: this close cancels none
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fileid.Of(fi).ID != g.Main.ID {
		return 0
	}
	pid, _ := holders.ExclusiveLocker(f)
	return pid
}

// isCloser reports whether p is SQLite's last closer of the store, caught
// between unlinking its own -shm and closing it: it holds the current
// main EXCLUSIVE (pid closer) and a -shm (a connection in
// locking_mode=EXCLUSIVE, the other way to hold it so, uses none), and
// every inode it holds that is not at its path is a sidecar. Stopping it
// would only stop a clean close; a writer whose sidecars someone else
// unlinked never holds the main EXCLUSIVE.
func isCloser(p *holders.Process, g store.Generation, closer int) bool {
	if closer <= 0 || p.Pid != closer {
		return false
	}
	shm := false
	for _, f := range p.Files {
		switch {
		case f.Role == holders.RoleMain && (!g.Main.Exists || f.ID != g.Main.ID):
			return false
		case f.Role == holders.RoleSHM:
			shm = true
		}
	}
	return shm
}

// freezeEarly is the fast freeze run by kick, on the caller's goroutine:
// what it stops waits in w.early for the worker's next check, which
// confirms or thaws it like any fast-path freeze. Everything fastFreeze
// reads is safe from any goroutine (the cache, the engine's holders, the
// policies and the restore intents take their own locks).
func (w *worker) freezeEarly(trigger time.Time) {
	gen := w.readGeneration()
	w.earlyMu.Lock()
	defer w.earlyMu.Unlock()
	if w.earlyClosed {
		return
	}
	if w.early == nil {
		w.early = map[int]frozenProc{}
	}
	n := len(w.early)
	w.fastFreeze(gen, w.early, trigger)
	if len(w.early) > n {
		// The check that confirms the freeze runs on the worker: a
		// replay there must not keep it waiting.
		w.yieldReplay("its writers were frozen")
	}
	w.lockFreezeAsync(gen, trigger)
}

// closeEarly, when the worker stops, thaws what the early freeze stopped
// and no check took: nobody stays stopped without an incident.
//
// One an incident owns stays stopped (thaw asks the ledger, which asks
// the engine): a fast freeze on a kicker's
// goroutine can stop a writer again after the check that opened its
// incident took the early freezes, and thawing it then let a writer the
// incident holds (policy hold) run on into the orphan once the agent
// stopped (TestResumedIncidentBeforeFirstCheck, once under load). It runs
// before the engine closes, while the engine still knows what it owns.
func (w *worker) closeEarly() {
	w.earlyMu.Lock()
	w.earlyClosed = true
	for pid, f := range w.early {
		delete(w.early, pid)
		w.thaw(pid, f, "the store's worker stopped before a check confirmed the freeze")
	}
	w.earlyMu.Unlock()
	// A lock pass still running sees earlyClosed and stops nobody; no
	// new one starts (lockFreezeAsync).
	w.lockWG.Wait()
	// What else is still stopped (a held open, a rewrite no check took)
	// is thawed too, and no path stops anyone from here on.
	for _, ref := range w.stops.close(w.owns) {
		w.log.Warn("holder thawed", "event", EventHolderThawed, "pid", ref.Pid,
			"reason", "the store's worker stopped before an incident took the process")
	}
}

// takeEarly moves the early freezes into this check's. One an incident
// owns by now (a check opened it after the freeze) is the incident's:
// this check must not thaw it as unconfirmed.
func (w *worker) takeEarly(frozen map[int]frozenProc) {
	w.earlyMu.Lock()
	defer w.earlyMu.Unlock()
	for pid, f := range w.early {
		delete(w.early, pid)
		if _, have := frozen[pid]; have || w.owns(f.ref) {
			w.stops.drop(f.ref) // the check's own stop, or the incident, holds it
			continue
		}
		frozen[pid] = f
	}
}

// handEarly gives processes stopped off the worker to its next check,
// which confirms or thaws them like the fast freeze's.
func (w *worker) handEarly(frozen map[int]frozenProc) {
	w.earlyMu.Lock()
	defer w.earlyMu.Unlock()
	for pid, f := range frozen {
		delete(frozen, pid)
		if w.earlyClosed {
			w.thaw(pid, f, "the store's worker stopped before a check confirmed the freeze")
			continue
		}
		if w.early == nil {
			w.early = map[int]frozenProc{}
		}
		if _, have := w.early[pid]; have {
			w.stops.drop(f.ref) // the early freeze's own stop holds it
			continue
		}
		w.early[pid] = f
	}
}

// frozenProc is a process this check stopped, and when.
type frozenProc struct {
	ref holders.ProcRef
	at  time.Time
	// seen is when the agent read the event this stop acted on (a kick's
	// time for the fast freeze, an open's or a write's for a rewrite);
	// zero: not known. The freeze latency is at - seen.
	seen time.Time
}

// stoppedAfter is ref stopped now, acting on an event read at seen.
func stoppedAfter(ref holders.ProcRef, seen time.Time) frozenProc {
	return frozenProc{ref: ref, at: time.Now(), seen: seen}
}

// frozenTimes is, for an incident's opening, when each process was
// stopped and, where the event it acted on is known, how long after that
// event: the freeze latency, from the event of that stop. An incident's
// own time (the change it classifies) can come after a stop, as a
// rewrite's write comes after the gate stopped its writers at the open.
// Never negative: seen is read before the stop.
func frozenTimes(frozen map[int]frozenProc) (map[int]time.Time, map[int]time.Duration) {
	at := make(map[int]time.Time, len(frozen))
	after := map[int]time.Duration{}
	for pid, f := range frozen {
		at[pid] = f.at
		if !f.seen.IsZero() {
			after[pid] = max(f.at.Sub(f.seen), 0)
		}
	}
	return at, after
}
