package supervisor

import (
	"context"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// onWorker parks the store's worker in a loop that runs what the test
// hands it, so the steps of one check can be replayed in order with no
// check of the worker's own in between; the test goroutine keeps t.
type onWorker struct {
	cmds chan func()
	done chan error
}

func parkWorker(t *testing.T, wk *worker) *onWorker {
	t.Helper()
	o := &onWorker{cmds: make(chan func()), done: make(chan error, 1)}
	entered := make(chan struct{})
	go func() {
		o.done <- wk.do(context.Background(), func() {
			close(entered)
			for f := range o.cmds {
				f()
			}
		})
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the store's worker did not take the test's step")
	}
	t.Cleanup(o.release)
	return o
}

func (o *onWorker) run(f func()) {
	ran := make(chan struct{})
	o.cmds <- func() { f(); close(ran) }
	<-ran
}

// release lets the worker go back to its own checks.
func (o *onWorker) release() {
	if o.cmds != nil {
		close(o.cmds)
		<-o.done
		o.cmds = nil
	}
}

// parkAfterFirstCheck waits until db's worker has checked the store and
// recorded it with no -wal, then parks the worker.
func parkAfterFirstCheck(t *testing.T, a *Agent, db string) (*worker, *onWorker) {
	t.Helper()
	wk := a.worker(db)
	if wk == nil {
		t.Fatal("store not watched")
	}
	hermestest.Eventually(t, "the agent's first check of the store", 10*time.Second, func() bool {
		var seen bool
		if err := wk.do(context.Background(), func() { seen = wk.haveGen && !wk.gen.WAL.Exists }); err != nil {
			t.Fatal(err)
		}
		return seen
	})
	return wk, parkWorker(t, wk)
}

// Chaos seed 1, cycle 724: a writer opened a store with no sidecars; the
// check that saw its -wal armed the guard on it at once (armOnOpen), and
// before that check ended the -wal was unlinked, the writer died (the disk
// was full) and another connection made a new -wal. The guard re-armed on
// the new one and closed the old: the only fd left on the rows the writer
// had acknowledged, which the guard's lock had kept from its close's
// checkpoint. The worker never recorded that -wal, so lostWAL, which looks
// at the generation the worker last saw, had nothing to compare. The steps
// are replayed here on the parked worker in the order that check took.
func TestGuardReArmKeepsAnUnlinkedWAL(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, guardOn)
	wk, park := parkAfterFirstCheck(t, a, db)

	w1 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "lost", Rate: 300, CheckpointEvery: -1})
	w1.WaitAcks(t, 20)
	walA := fileID(t, db+"-wal")
	var armed fileid.ID
	park.run(func() {
		wk.guardSync(wk.readGeneration()) // what armOnOpen does for a new -wal
		if g := wk.guard.g; g != nil {
			armed = g.IDs().WAL
		}
	})
	if armed != walA {
		t.Fatalf("guard armed on -wal %v, want the writer's %v", armed, walA)
	}
	w1.Kill() // no close, no checkpoint: its rows are only in the -wal
	<-w1.Done()
	acks := w1.Acks(t)
	if miss := missingAcks(acks, mainOnlyRows(t, db)); len(miss) == 0 {
		t.Fatal("every row already in the main file: the test cannot tell the unlinked -wal is recovered")
	}
	removeSidecars(t, db)
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "next", Rate: 50, CheckpointEvery: -1})
	w2.WaitAcks(t, 1)
	park.run(func() { wk.guardSync(wk.readGeneration()) }) // the settle's re-arm on the new -wal
	park.release()

	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if inc.Kind != journal.KindSidecarLost || inc.State != journal.StateResolved || len(inc.Detail.Holders) != 0 {
		t.Fatalf("incident %s: kind %s state %s holders %+v error %q", inc.ID, inc.Kind, inc.State, inc.Detail.Holders, inc.Detail.Error)
	}
	if err := w2.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, a, db)
	rows := dbRows(t, db)
	checkExactlyOnce(t, acks, rows, time.Time{}, time.Time{})
	checkExactlyOnce(t, w2.Acks(t), rows, time.Time{}, time.Time{})
	if incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{Store: db}); err != nil || len(incs) != 1 {
		t.Fatalf("incidents %+v (%v), want the one sidecar_lost", incs, err)
	}
}

// A kept -wal whose writer is still alive is that writer's incident's
// orphan: the scan finds the writer, its incident captures the -wal, and
// the kept guard adds no second incident for the same frames.
func TestGuardReArmLeavesALiveOrphanToItsIncident(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, guardOn)
	wk, park := parkAfterFirstCheck(t, a, db)
	w1 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "orphan", Rate: 300, CheckpointEvery: -1})
	w1.WaitAcks(t, 20)
	park.run(func() { wk.guardSync(wk.readGeneration()) })
	removeSidecars(t, db) // under the live writer
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "next", Rate: 50, CheckpointEvery: -1})
	w2.WaitAcks(t, 1)
	var kept int
	park.run(func() {
		wk.guardSync(wk.readGeneration())
		kept = len(wk.guard.lost)
	})
	if kept != 1 {
		t.Fatalf("%d guards kept for the unlinked -wal, want 1", kept)
	}
	park.release()

	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if inc.Kind != journal.KindSidecarLost || inc.State != journal.StateResolved || len(inc.Detail.Holders) != 1 {
		t.Fatalf("incident %s: kind %s state %s holders %+v error %q", inc.ID, inc.Kind, inc.State, inc.Detail.Holders, inc.Detail.Error)
	}
	<-w1.Done() // the incident's kill policy
	if err := w2.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, a, db)
	rows := dbRows(t, db)
	checkExactlyOnce(t, w1.Acks(t), rows, time.Time{}, time.Time{})
	if incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{Store: db}); err != nil || len(incs) != 1 {
		t.Fatalf("incidents %+v (%v), want only the writer's", incs, err)
	}
	var left int
	if err := wk.do(context.Background(), func() { left = len(wk.guard.lost) }); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d kept guards left after the incident", left)
	}
}
