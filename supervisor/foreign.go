package supervisor

import (
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// checkForeignSidecars handles a main replaced under nobody while the old
// generation's -wal (with frames in it) stayed at the path: no writer is
// at risk, but the next opener would recover that foreign WAL into the
// new main. It is a mispaired incident without holders: quarantine the
// sidecars into a capture before anyone opens the store.
func (w *worker) checkForeignSidecars(ch store.Change, old, gen store.Generation, sr *holders.StoreResult, at time.Time) {
	if !ch.Has(store.MainReplaced) || ch.Has(store.WALReplaced) || ch.Has(store.WALRemoved) || ch.Has(store.WALCreated) {
		return
	}
	if !gen.WAL.Exists || gen.WAL.Size <= store.WALHeaderSize {
		return // no frames: nothing a new opener could recover
	}
	if _, why := w.foreignAt(gen); why != "" {
		return // not the store's to move into its capture (guardSync says so)
	}
	for _, p := range sr.Holders {
		for _, f := range p.Files {
			if f.Role == holders.RoleWAL {
				w.log.Error("new main opened with the old generation's WAL; files left in place, check the store by hand",
					"event", incident.EventCaptureFailed, "pid", p.Pid, "critical", true)
				return
			}
		}
	}
	want := map[string]fileid.ID{"-wal": gen.WAL.ID}
	if gen.SHM.Exists {
		want["-shm"] = gen.SHM.ID
	}
	w.engine().Open(incident.Opening{Kind: journal.KindMispaired, Policy: incident.PolicyObserve, At: at,
		Old: generationRecord(old), New: generationRecord(gen), Quarantine: want})
}
