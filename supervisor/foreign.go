package supervisor

import (
	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// checkForeignSidecars handles a main replaced under nobody while the old
// generation's -wal (with frames in it) stayed at the path: no writer is
// at risk, but the next opener would recover that foreign WAL into the
// new main. It is a mispaired incident without holders: quarantine the
// sidecars into a capture before anyone opens the store.
func (w *worker) checkForeignSidecars(ch store.Change, gen store.Generation, sr *holders.StoreResult) {
	if !ch.Has(store.MainReplaced) || ch.Has(store.WALReplaced) || ch.Has(store.WALRemoved) || ch.Has(store.WALCreated) {
		return
	}
	if !gen.WAL.Exists || gen.WAL.Size <= store.WALHeaderSize {
		return // no frames: nothing a new opener could recover
	}
	for _, p := range sr.Holders {
		for _, f := range p.Files {
			if f.Role == holders.RoleWAL {
				w.log.Error("new main opened with the old generation's WAL; files left in place, check the store by hand",
					"event", EventCaptureFailed, "pid", p.Pid, "critical", true)
				return
			}
		}
	}
	inc, err := w.a.journal.OpenIncident(w.a.ctx, journal.Incident{
		Store: w.st.Path, Profile: w.st.Profile, Home: w.st.Home, Kind: journal.KindMispaired, State: journal.StateOpen, Policy: "none",
		Detail: journal.IncidentDetail{OldGeneration: generationRecord(w.gen), NewGeneration: generationRecord(gen)},
	})
	if err != nil {
		w.log.Error("journal incident failed", "err", err)
		return
	}
	li := &liveIncident{id: inc.ID, kind: journal.KindMispaired, policy: PolicyObserve, state: journal.StateOpen, openedAt: inc.OpenedAt}
	w.a.opts.Metrics.IncidentOpened(string(journal.KindMispaired))
	w.a.opts.Metrics.IncidentState(string(journal.KindMispaired), string(journal.StateOpen), 1)
	w.mu.Lock()
	w.live[li.id] = li
	w.mu.Unlock()
	w.log.Error("old generation's sidecars next to a new main", "event", EventIncidentOpened, "incident", li.id, "kind", string(journal.KindMispaired), "holders", []int{})
	staging, err := recovery.StageCapture(w.captureRequest(li))
	if err != nil {
		w.note(li, err.Error())
		return
	}
	li.staging = staging
	want := map[string]fileid.ID{"-wal": gen.WAL.ID}
	if gen.SHM.Exists {
		want["-shm"] = gen.SHM.ID
	}
	moved, err := recovery.QuarantineSidecars(w.st.Path, staging, want)
	if err != nil {
		w.note(li, err.Error())
	}
	if len(moved) > 0 {
		w.log.Warn("foreign sidecars quarantined", "event", EventSidecarsQuarantined, "incident", li.id, "moved", moved)
	}
	w.transition(li, journal.StateReleased, journal.Step{Name: journal.StepQuarantined, Detail: map[string]any{"moved": moved}})
}
