package supervisor

import (
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// A guard re-armed on a new -wal may hold the only fd left on the old
// one. lostWAL covers the -wal of the generation the worker last saw; this
// covers a -wal the worker never recorded: a connection created it, the
// guard armed on it inside a check (armOnOpen), and before the check ended
// it was unlinked and another connection made a new one. Its writer (gone
// on a full disk, in the chaos run that found this: seed 1, cycle 724)
// could not checkpoint on close because the guard held its read lock, so
// its acknowledged rows were only in that -wal, and the re-arm closed it.
//
// So the re-arm never closes an unlinked -wal: it keeps the old guard
// (keepLostWAL) until the check's scan has said whether a process still
// holds that inode, then adoptLostWALs hands it to the incident of its
// holder, keeps it while an unhandled holder remains, or opens a
// sidecar_lost incident for the rows only it has.

// keepLostWAL takes old, being replaced by a guard on next, when its -wal
// is unlinked next to the same main and no incident claimed it.
func (w *worker) keepLostWAL(old *holders.Guard, next fileid.Family, claimed fileid.ID) bool {
	ids := old.IDs()
	if old.WAL() == nil || ids.WAL.IsZero() || ids.WAL == next.WAL || ids.Main != next.Main || ids.WAL == claimed {
		return false
	}
	fi, err := old.WAL().Stat()
	if err != nil || !fileid.Supported || fileid.Of(fi).Nlink != 0 {
		return false // renamed, not unlinked: another incident's capture
	}
	w.guard.lost = append(w.guard.lost, old)
	w.log.Debug("guard keeps an unlinked -wal until the scan has looked at its holders", "wal", ids.WAL.String())
	return true
}

// adoptLostWALs settles the kept guards once a scan (sr) has run; orphans
// are the holders this check opened an incident for.
func (w *worker) adoptLostWALs(sr *holders.StoreResult, orphans []holders.Process, gen store.Generation, at time.Time) {
	kept := w.guard.lost[:0]
	for _, g := range w.guard.lost {
		ids := g.IDs()
		held, handled := false, false
		if sr != nil {
			for i := range sr.Holders {
				p := &sr.Holders[i]
				for _, f := range p.Files {
					if f.ID != ids.WAL {
						continue
					}
					held = true
					if w.owns(p.Ref()) || findPid(orphans, p.Pid) != nil {
						handled = true
					}
				}
			}
		}
		switch {
		case handled:
			w.guardCloseOne(g, "its -wal is an incident's orphan")
		case held:
			kept = append(kept, g) // a holder no incident handles yet: the next check
		default:
			old := &journal.GenerationRecord{Main: journal.FileRecord{ID: ids.Main}, WAL: journal.FileRecord{ID: ids.WAL}, SHM: journal.FileRecord{ID: ids.SHM}}
			w.openLostWAL(g, old, gen, at)
			w.guardCloseOne(g, "unlinked -wal handed to its incident")
		}
	}
	clear(w.guard.lost[len(kept):])
	w.guard.lost = kept
}

// closeLostWALs lets go of the kept guards when the worker stops.
func (w *worker) closeLostWALs(why string) {
	for _, g := range w.guard.lost {
		w.guardCloseOne(g, why)
	}
	w.guard.lost = nil
}
