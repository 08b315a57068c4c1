package supervisor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// The fast freeze does not wait for the store's worker: while the worker
// is busy with a long step (here an operator request that does not
// return), a restore's orphan is stopped all the same, and the incident
// opens once the worker is free again. Before, the freeze waited behind
// the step (a divert under load took over a second).
func TestFreezeWhileWorkerBusy(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, nil)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300})
	waitHolder(t, a, db, w.Pid)

	release, busy := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the agent's Close, which waits for the worker
	done := make(chan error, 1)
	go func() {
		done <- a.worker(db).do(context.Background(), func() { close(busy); <-release })
	}()
	<-busy
	hermestest.RenameFreshOver(t, db)
	hermestest.Eventually(t, "the orphan stopped while the worker is busy", 10*time.Second, func() bool {
		return hermestest.StateOf(w.Pid) == 'T'
	})
	free()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if inc.State != journal.StateResolved {
		t.Fatalf("incident %s: state %s error %q", inc.ID, inc.State, inc.Detail.Error)
	}
	waitExit(t, w, 10*time.Second)
	checkExactlyOnce(t, w.Acks(t), dbRows(t, db), inc.Detail.ReplacedAt, time.Time{})
}

// A thaw from another handler (a rewrite's check letting go of the
// writers it stopped, the confirm of an earlier change) must not undo an
// early freeze that stopped the same process since: SIGSTOP does not
// count, and the incident would find its orphan running. Seen under load
// in TestGuardKeepsWALAgainstWrongLastCloser/paused: "holder not stopped"
// and a capture of the shared main taken while the writer checkpointed
// into it failed its integrity check.
func TestThawLeavesAnEarlyFreeze(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, func(o *Options) { o.Reconcile = time.Hour })
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300})
	waitHolder(t, a, db, w.Pid)
	known, _ := a.cache.Known(holders.Target{Path: db})
	p := findPid(known.Holders, w.Pid)
	if p == nil {
		t.Fatalf("the cache does not list writer %d", w.Pid)
	}

	wk := a.worker(db)
	release, busy := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	done := make(chan error, 1)
	go func() { done <- wk.do(context.Background(), func() { close(busy); <-release }) }()
	<-busy
	restoreWithSidecars(t, db)
	hermestest.Eventually(t, "the early freeze to stop the orphan", 10*time.Second, func() bool {
		return hermestest.StateOf(w.Pid) == 'T'
	})
	// What rewrite.go's check does with a writer it had stopped itself:
	// its own stop, then its thaw.
	if err := wk.stops.stop(p.Ref()); err != nil {
		t.Fatal(err)
	}
	wk.thaw(w.Pid, frozenProc{ref: p.Ref(), at: time.Now()}, "another handler's freeze is over")
	if st := hermestest.StateOf(w.Pid); st != 'T' {
		t.Fatalf("writer in state %c after another handler's thaw: the early freeze was undone", st)
	}
	free()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if inc.State != journal.StateResolved {
		t.Fatalf("incident %s: state %s error %q", inc.ID, inc.State, inc.Detail.Error)
	}
	waitExit(t, w, 10*time.Second)
}
