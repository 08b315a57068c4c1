package supervisor

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// TestAliveFollowsTheWorker: the liveness probe answers while the store's
// worker turns, fails naming the store once a step of an incident hangs
// longer than the budget (injected through the engine's hook), and
// answers again when the step goes on. Covered and Summary see the store
// and the open incident.
func TestAliveFollowsTheWorker(t *testing.T) {
	home, db := testHome(t)
	reached, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hooks := incident.Hooks{BeforeStep: func(_ string, s journal.State) {
		if s == journal.StatePinned {
			once.Do(func() { close(reached); <-proceed })
		}
	}}
	a := startAgent(t, home, func(o *Options) { o.Policies.Replaced, o.Hooks = incident.PolicyKill, hooks })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Covered(ctx); err != nil {
		t.Fatalf("Covered: %v", err)
	}
	probe := func(budget time.Duration) error {
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer pcancel()
		return a.Alive(pctx, budget)
	}
	if err := probe(time.Hour); err != nil {
		t.Fatalf("an idle agent is not alive: %v", err)
	}
	if s, err := a.Summary(ctx); err != nil || s.Stores != 1 || s.IncidentsOpen != 0 {
		t.Fatalf("Summary = %+v, %v; want 1 store, no incident", s, err)
	}

	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300})
	waitHolder(t, a, db, w.Pid)
	w.AcksGrow(t, 10)
	hermestest.RenameFreshOver(t, db)
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the incident never reached its pin step")
	}
	// Within the budget a step in flight counts as answering; past it the
	// worker is wedged.
	if err := probe(time.Hour); err != nil {
		t.Errorf("a step within its budget made the agent unhealthy: %v", err)
	}
	var err error
	hermestest.Eventually(t, "the probe to give up on the hung worker", 10*time.Second, func() bool {
		err = probe(50 * time.Millisecond)
		return err != nil
	})
	if !strings.Contains(err.Error(), db) {
		t.Errorf("the probe's error does not name the store: %v", err)
	}
	if s, _ := a.Summary(ctx); s.IncidentsOpen != 1 {
		t.Errorf("Summary during the incident = %+v, want 1 incident open", s)
	}
	close(proceed)
	hermestest.Eventually(t, "the probe to answer again", 20*time.Second, func() bool { return probe(50*time.Millisecond) == nil })
}
