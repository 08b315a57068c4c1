package supervisor

import (
	"path/filepath"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/store"
)

// fastFreeze stops, from the holder cache alone, every process the last
// scan saw able to write an inode that is not the one at its path in gen
// and that still holds it now (one stat per fd: the cache is older than
// the change, and SQLite's own last closer has closed its -wal before it
// unlinks it); the targeted re-scan confirms or thaws afterwards. A
// process that only reads the store is never stopped, nor one that is
// closing the store as its last connection.
func (w *worker) fastFreeze(gen store.Generation, frozen map[int]frozenProc) {
	known, ok := w.a.cache.Known(w.target)
	if !ok {
		return
	}
	pol := w.a.policies(w.st.Path)
	closer := -1 // not asked yet
	fresh := false
	for i := range known.Holders {
		p := &known.Holders[i]
		if _, done := frozen[p.Pid]; done || !p.MayWrite() || !holdsStale(p, gen) || w.owns(p.Ref()) || w.a.excluded(p) || w.restorer(p.Ref()) {
			continue
		}
		if !fresh {
			// gen may predate the cache entry: a writer creating its
			// store makes -wal, then -shm, and a scan between gen's read
			// and now lists a sidecar gen has not seen. Judge against
			// the paths as they are after the cache was read.
			gen, fresh = w.readGeneration(), true
			if !holdsStale(p, gen) {
				continue
			}
		}
		if pol.For(guessKind(p, gen)) == incident.PolicyObserve || !stillHoldsStale(p, gen) {
			continue
		}
		if closer < 0 {
			closer = closingPid(w.st, gen)
		}
		if isCloser(p, gen, closer) {
			continue
		}
		if err := holders.Freeze(p.Ref()); err == nil {
			frozen[p.Pid] = frozenProc{ref: p.Ref(), at: time.Now()}
		}
	}
}

// stillHoldsStale reports whether p still holds, now, one of the inodes
// the cache says it holds that is not at its path in g.
func stillHoldsStale(p *holders.Process, g store.Generation) bool {
	for _, f := range p.Files {
		if cur := fileOf(g, f.Role); (!cur.Exists || cur.ID != f.ID) && holders.StillHolds(p, f.ID) {
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
func (w *worker) freezeEarly() {
	gen := w.readGeneration()
	w.earlyMu.Lock()
	defer w.earlyMu.Unlock()
	if w.earlyClosed {
		return
	}
	if w.early == nil {
		w.early = map[int]frozenProc{}
	}
	w.fastFreeze(gen, w.early)
}

// closeEarly, when the worker stops, thaws what the early freeze stopped
// and no check took: nobody stays stopped without an incident.
func (w *worker) closeEarly() {
	w.earlyMu.Lock()
	defer w.earlyMu.Unlock()
	w.earlyClosed = true
	for pid, f := range w.early {
		w.thawLocked(pid, f, "the store's worker stopped before a check confirmed the freeze")
		delete(w.early, pid)
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
			continue
		}
		frozen[pid] = f
	}
}

// frozenProc is a process this check stopped, and when.
type frozenProc struct {
	ref holders.ProcRef
	at  time.Time
}
