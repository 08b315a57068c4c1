package supervisor

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// An incident that ends with nothing to replay (the frame cut leaves no
// row after the restore) writes nothing into the store, so no generation
// change brings a full scan before it resolves: the holder cache still
// lists the writer the incident killed, holding the replaced files. The
// checks that follow (the writer's exit wakes the worker, so does any
// event) must not take that dead writer for a new orphan. Before, each
// such check opened a replaced incident for it, which failed with
// "nothing pinned to capture" and whose own release woke the worker
// again: hundreds of failed incidents a second (chaos seed 7).
func TestDeadHolderOpensNoIncident(t *testing.T) {
	for _, guard := range []bool{false, true} {
		t.Run(fmt.Sprintf("guard=%v", guard), func(t *testing.T) {
			home, db := testHome(t)
			// No reconcile: its full scan would hide a stale cache.
			a := startAgent(t, home, func(o *Options) { o.Reconcile, o.Guard = time.Hour, guard })
			w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300, Count: 30, Linger: true})
			waitHolder(t, a, db, w.Pid)
			w.WaitAcks(t, 30) // then it commits nothing more: nothing after the cut
			restoreWithSidecars(t, db)
			inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
			if inc.State != journal.StateResolved {
				t.Fatalf("incident %s: kind %s state %s error %q", inc.ID, inc.Kind, inc.State, inc.Detail.Error)
			}
			waitExit(t, w, 10*time.Second)

			// What a kick does, run on the worker so it is over when do
			// returns (the engine advances after it, as after a kick).
			wk := a.worker(db)
			for range 3 {
				if err := wk.do(context.Background(), func() { wk.check(time.Now()) }); err != nil {
					t.Fatal(err)
				}
			}
			incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{Store: db})
			if err != nil {
				t.Fatal(err)
			}
			if len(incs) != 1 {
				for _, i := range incs {
					t.Logf("incident %s: kind %s state %s holders %+v error %q", i.ID, i.Kind, i.State, i.Detail.Holders, i.Detail.Error)
				}
				t.Fatalf("%d incidents for one restore; want 1 (a dead holder opened the others)", len(incs))
			}
			if live := wk.liveIDs(); len(live) > 0 {
				t.Fatalf("incidents %v open for a writer that is gone", live)
			}
		})
	}
}

// restoreWithSidecars renames a fresh main and empty -wal and -shm over
// db's, as a restore of a file-level backup with its sidecars does (the
// chaos restore-rename): the store at the path has its own sidecars, so
// reading it for the divert changes nothing there.
func restoreWithSidecars(t *testing.T, db string) {
	t.Helper()
	hermestest.RenameFreshOver(t, db)
	for _, suf := range []string{"-wal", "-shm"} {
		tmp := db + ".restore-tmp" + suf
		if err := os.WriteFile(tmp, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, db+suf); err != nil {
			t.Fatal(err)
		}
	}
}

// A scan result can be older than a holder's death (the cache's, or a
// full scan's a moment before the process exits): confirm takes no
// holder that is gone by then for an orphan, so a generation change
// after its writer died opens no incident.
func TestExitedHolderIsNoOrphan(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, func(o *Options) { o.Reconcile = time.Hour })
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300, Count: 30, Linger: true})
	waitHolder(t, a, db, w.Pid)
	w.WaitAcks(t, 30)
	known, ok := a.cache.Known(holders.Target{Path: db})
	if !ok || findPid(known.Holders, w.Pid) == nil {
		t.Fatalf("the cache does not list writer %d: %+v", w.Pid, known.Holders)
	}
	// As a scan after the restore below saw it: every file it holds is
	// no longer the one at its path.
	stale := known
	stale.Holders = nil
	for _, p := range known.Holders {
		p.Files = slices.Clone(p.Files)
		for i := range p.Files {
			p.Files[i].Current = false
		}
		stale.Holders = append(stale.Holders, p)
	}
	w.Kill()
	waitExit(t, w, 10*time.Second)
	restoreWithSidecars(t, db)

	wk := a.worker(db)
	var orphans []holders.Process
	if err := wk.do(context.Background(), func() { orphans = wk.confirm(&stale, map[int]frozenProc{}) }); err != nil {
		t.Fatal(err)
	}
	if len(orphans) > 0 {
		t.Fatalf("confirm took %d exited holder(s) for orphans: %+v", len(orphans), orphans)
	}
}
