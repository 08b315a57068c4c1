package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// scaleHome makes a home with a default store and n named profiles, each
// with an empty state.db (a valid, empty SQLite database): a store with
// a worker, cheap to make by the hundred.
func scaleHome(t *testing.T, n int) string { return scaleHomeB(t, n) }

func scaleHomeB(t testing.TB, n int) string {
	t.Helper()
	home, _ := testHome(t)
	for i := range n {
		dir := filepath.Join(home, "profiles", fmt.Sprintf("p%05d", i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "state.db"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

// firstChecksDone waits until every worker has had its first check (its
// guard state is set), reading the guards directly so the wait itself
// adds nothing to the counters but one worker listing.
func firstChecksDone(t *testing.T, a *Agent, want int) {
	t.Helper()
	ws := a.allWorkers()
	if len(ws) != want {
		t.Fatalf("%d workers, want %d", len(ws), want)
	}
	hermestest.Eventually(t, "every store's first check", 60*time.Second, func() bool {
		for _, w := range ws {
			w.guard.mu.Lock()
			set := w.guard.set
			w.guard.mu.Unlock()
			if !set {
				return false
			}
		}
		return true
	})
}

// Starting N stores does work linear in N: the Agent's lock is taken and
// guards are read a bounded number of times per store, not once per pair
// of stores (issue 16: each new worker's guard check counted the armed
// guards of every worker). Counted, not timed.
func TestStartupWorkLinear(t *testing.T) {
	cost := map[int]workCount{}
	for _, n := range []int{40, 160} {
		home := scaleHome(t, n)
		a := startAgent(t, home, func(o *Options) { o.Reconcile = time.Hour; o.Guard = true })
		firstChecksDone(t, a, n+1)
		cost[n] = a.workCount()
		armed := 0
		for _, w := range a.allWorkers() {
			w.guard.mu.Lock()
			if w.guard.status.State == control.GuardArmed {
				armed++
			}
			w.guard.mu.Unlock()
		}
		if got := a.Armed(); got != armed {
			t.Errorf("n=%d: the agent counts %d guards armed, its workers say %d", n, got, armed)
		}
		t.Logf("n=%d: %+v", n, cost[n])
	}
	for n, c := range cost {
		stores := int64(n + 1)
		if c.AgentLocks > 4*stores+20 {
			t.Errorf("n=%d: the agent's lock was taken %d times for %d stores (want at most %d)", n, c.AgentLocks, stores, 4*stores+20)
		}
		if c.GuardReads > stores {
			t.Errorf("n=%d: %d guard reads for %d stores (want at most one each)", n, c.GuardReads, stores)
		}
	}
}
