package supervisor

import (
	"context"
	"sync"
	"testing"
	"time"

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
