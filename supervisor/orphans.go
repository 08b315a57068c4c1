package supervisor

import (
	"errors"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// How a check tells an orphan holder from a current one, and which kind
// of incident its holdings make: pure functions of a holder's files and
// the generation at the store's paths.

// exited reports whether an inspected holder is gone (or a zombie, which
// holds no file) since the scan saw it: it can keep no orphan alive and
// write none, so it opens no incident; what it left is a plain generation
// change (lostWAL looks at a -wal that went with it). A holder known only
// from lock evidence has no start time to check and is kept.
func exited(p *holders.Process) bool {
	if !p.Inspected {
		return false
	}
	st, err := holders.State(p.Ref())
	return errors.Is(err, holders.ErrProcessGone) || (err == nil && (st == 'Z' || st == 'X'))
}

// holdsStaleData reports whether p holds a main or -wal that is not the
// one at its path in g: what a read-only holder must hold for there to be
// anything to capture. One that holds only an old -shm (rebuilt from the
// WAL, never captured) is no incident: often it is not even the store's
// (an unrelated file that got a freed -shm's inode number).
func holdsStaleData(p *holders.Process, g store.Generation) bool {
	for _, f := range p.Files {
		if cur := fileOf(g, f.Role); f.Role != holders.RoleSHM && (!cur.Exists || cur.ID != f.ID) {
			return true
		}
	}
	return false
}

// orphansNow keeps the orphans that hold an inode that is not the one at
// its path in now, read after the scan. The scan lstats the paths before
// it inspects the processes: a process that opened the store's next
// generation in between (a gateway starting right after the sidecars were
// removed) holds files the scan saw as not current, and is no orphan.
func orphansNow(orphans []holders.Process, now store.Generation) []holders.Process {
	var out []holders.Process
	for i := range orphans {
		if holdsStale(&orphans[i], now) {
			out = append(out, orphans[i])
		}
	}
	return out
}

// holdsStale reports whether a cached holder holds an inode of the store
// that is not the one now at its path.
func holdsStale(p *holders.Process, g store.Generation) bool {
	for _, f := range p.Files {
		cur := fileOf(g, f.Role)
		if !cur.Exists || cur.ID != f.ID {
			return true
		}
	}
	return false
}

func fileOf(g store.Generation, r holders.Role) fileid.State {
	switch r {
	case holders.RoleWAL:
		return g.WAL
	case holders.RoleSHM:
		return g.SHM
	}
	return g.Main
}

// guessKind classifies one cached holder against a generation, for the
// fast path's policy look-up only.
func guessKind(p *holders.Process, g store.Generation) journal.Kind {
	for _, f := range p.Files {
		if f.Role == holders.RoleMain && (!g.Main.Exists || g.Main.ID != f.ID) {
			return journal.KindReplaced
		}
	}
	return journal.KindSidecarLost
}

// classify names the incident from the fresh scan's orphan holders: the
// main replaced with the old sidecars still at the path is mispaired,
// main replaced otherwise is replaced, and orphaned sidecars under the
// same main are sidecar_lost.
func classify(orphans []holders.Process) journal.Kind {
	kind := journal.KindSidecarLost
	for _, p := range orphans {
		mainGone, sidecarCurrent := false, false
		for _, f := range p.Files {
			switch {
			case f.Role == holders.RoleMain && !f.Current:
				mainGone = true
			case f.Role != holders.RoleMain && f.Current:
				sidecarCurrent = true
			}
		}
		if mainGone && sidecarCurrent {
			return journal.KindMispaired
		}
		if mainGone {
			kind = journal.KindReplaced
		}
	}
	return kind
}

func findPid(ps []holders.Process, pid int) *holders.Process {
	for i := range ps {
		if ps[i].Pid == pid {
			return &ps[i]
		}
	}
	return nil
}
