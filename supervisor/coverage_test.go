package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// An idle store costs no goroutine: once every store has had its first
// check, no worker has one running, and an agent on eight times as many
// stores runs (nearly) the same number of goroutines. A kick starts one,
// which ends once the check is done. Counted, not timed.
func TestIdleStoresHaveNoGoroutine(t *testing.T) {
	counts := map[int]int{}
	for _, n := range []int{20, 160} {
		home := scaleHome(t, n)
		a := startAgent(t, home, func(o *Options) { o.Reconcile = time.Hour })
		firstChecksDone(t, a, n+1)
		hermestest.Eventually(t, "every worker idle", 30*time.Second, func() bool { return runningWorkers(a) == 0 })
		counts[n] = runtime.NumGoroutine()
		w := a.allWorkers()[0]
		before := w.seen.Load()
		w.kick(time.Now())
		hermestest.Eventually(t, "the kicked worker to check and go idle", 30*time.Second, func() bool {
			return !w.running.Load() && len(w.kickC) == 0
		})
		if w.seen.Load() == before {
			t.Errorf("n=%d: the kick ran no check", n)
		}
		t.Logf("n=%d: %d goroutines", n, counts[n])
	}
	if d := counts[160] - counts[20]; d > 20 {
		t.Errorf("140 more idle stores cost %d more goroutines (want none but noise)", d)
	}
}

func runningWorkers(a *Agent) int {
	n := 0
	for _, w := range a.allWorkers() {
		if w.running.Load() {
			n++
		}
	}
	return n
}

// A reconcile reads again only the stores no event covers: with every
// directory watched and nothing happening, each reconcile reads the
// stores whose audit turn it is, so auditEvery reconciles read each store
// exactly once; a changed store is read by the check its event starts;
// after events may have been lost (owedAll) the next reconcile reads all
// of them. Counted (the scans' Stated), not timed.
func TestReconcileReadsOnlyUncoveredStores(t *testing.T) {
	const n = 45
	home := scaleHome(t, n)
	a := startAgent(t, home, func(o *Options) { o.Reconcile = time.Hour })
	firstChecksDone(t, a, n+1)
	stores := int64(n + 1)
	stated := func() int64 { return a.workCount().Stated }

	base := stated()
	for range auditEvery {
		a.reconcile()
	}
	if got := stated() - base; got != stores {
		t.Errorf("%d quiet reconciles read %d stores' paths; want each of the %d exactly once", auditEvery, got, stores)
	}

	// A change at one store's paths: its event makes the check's scan
	// read it, and what the cache holds for it is the new file.
	db := filepath.Join(home, "profiles", "p00007", "state.db")
	w := a.worker(db)
	if w == nil {
		t.Fatalf("no worker for %s", db)
	}
	hermestest.RenameFreshOver(t, db)
	fi, err := os.Lstat(db)
	if err != nil {
		t.Fatal(err)
	}
	fresh := fileid.Of(fi).ID
	hermestest.Eventually(t, "the worker to see the new main", 30*time.Second, func() bool {
		f := w.seen.Load()
		return f != nil && f.Main == fresh
	})
	hermestest.Eventually(t, "the holder cache to hold the new main", 30*time.Second, func() bool {
		sr, ok := a.cache.Known(w.target)
		return ok && sr.Current.Of(holders.RoleMain).ID == fresh
	})

	a.owedAll()
	base = stated()
	a.reconcile()
	if got := stated() - base; got != stores {
		t.Errorf("after events may have been lost, a reconcile read %d stores; want all %d", got, stores)
	}
}

// An idle reconcile builds no store's scan result: each store's is the
// last full scan's again (holders.Result.Reused), also for the stores its
// audit reads again and finds the same. A store that changes is built
// again, and only it.
func TestIdleReconcileRebuildsNoStoreResult(t *testing.T) {
	const n = 30
	home := scaleHome(t, n)
	a := startAgent(t, home, func(o *Options) { o.Reconcile = time.Hour })
	firstChecksDone(t, a, n+1)
	rebuilt := func() int64 { return a.workCount().Rebuilt }
	a.reconcile() // the first reconcile may build what the first checks' scans did not

	base := rebuilt()
	for range auditEvery {
		a.reconcile()
	}
	if got := rebuilt() - base; got != 0 {
		t.Errorf("%d idle reconciles built %d stores' scan results; want none", auditEvery, got)
	}

	db := filepath.Join(home, "profiles", "p00011", "state.db")
	w := a.worker(db)
	if w == nil {
		t.Fatalf("no worker for %s", db)
	}
	hermestest.RenameFreshOver(t, db)
	fi, err := os.Lstat(db)
	if err != nil {
		t.Fatal(err)
	}
	fresh := fileid.Of(fi).ID
	hermestest.Eventually(t, "the worker to see the new main", 30*time.Second, func() bool {
		f := w.seen.Load()
		return f != nil && f.Main == fresh
	})
	base = rebuilt()
	a.reconcile()
	if got := rebuilt() - base; got != 0 {
		t.Errorf("the reconcile after one store's check had scanned its change built %d results; want none", got)
	}
	a.owedAll() // every store read again: found the same
	base = rebuilt()
	a.reconcile()
	if got := rebuilt() - base; got != 0 {
		t.Errorf("a reconcile that read every store again and found each as before built %d results; want none", got)
	}
}

// A pending store (a profile directory with no state.db yet) in a watched
// directory is looked at by reconciles only at its audit turn, or when
// events may have been lost; its state.db appearing is an event. Without
// fsnotify every reconcile looks at every one.
func TestReconcileLooksAtPendingStoresOnlyWhenUncovered(t *testing.T) {
	const n, empty = 5, 40
	home := scaleHome(t, n)
	for i := range empty {
		if err := os.Mkdir(filepath.Join(home, "profiles", fmt.Sprintf("x%03d", i)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, notify := range []bool{true, false} {
		a := startAgent(t, home, func(o *Options) { o.Reconcile = time.Hour; o.DisableNotify = !notify })
		firstChecksDone(t, a, n+1)
		looked := func() int64 { return a.workCount().Pending }
		base := looked()
		for range auditEvery {
			a.reconcile()
		}
		want := int64(empty)
		if !notify {
			want = empty * auditEvery
		}
		if got := looked() - base; got != want {
			t.Errorf("notify %v: %d reconciles looked at %d pending stores; want %d", notify, auditEvery, got, want)
		}
		if notify {
			a.owedAll()
			base = looked()
			a.reconcile()
			if got := looked() - base; got != empty {
				t.Errorf("after events may have been lost, a reconcile looked at %d pending stores; want all %d", got, empty)
			}
			// and the event of a state.db appearing starts its worker
			db := filepath.Join(home, "profiles", "x007", "state.db")
			if err := hermestest.CreateStore(db); err != nil {
				t.Fatal(err)
			}
			hermestest.Eventually(t, "a worker for the new store", 30*time.Second, func() bool { return a.worker(db) != nil })
			if err := os.Remove(db); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// Without fsnotify nothing is covered: every scan reads every store.
func TestReconcileReadsEveryStoreWithoutNotify(t *testing.T) {
	const n = 9
	home := scaleHome(t, n)
	a := startAgent(t, home, func(o *Options) { o.Reconcile = time.Hour; o.DisableNotify = true })
	firstChecksDone(t, a, n+1)
	base := a.workCount().Stated
	a.reconcile()
	if got := a.workCount().Stated - base; got != n+1 {
		t.Errorf("a reconcile without fsnotify read %d stores; want all %d", got, n+1)
	}
}

// A stale partial capture (its agent dead) is removed by the reconcile
// walker, not on the start path: the agent starts with it in place, and
// the first reconcile removes it; one of this agent's own is kept.
func TestWalkerCleansStalePartials(t *testing.T) {
	home, db := testHome(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	partial := func(name string, pid int) string {
		p := filepath.Join(filepath.Dir(db), name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]any{"agent_pid": pid, "database": db})
		if err := os.WriteFile(filepath.Join(p, ".stateguard-partial"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := partial("state.db.retired-wal-20261001-000000-1.partial", dead.Process.Pid)
	ours := partial("state.db.retired-wal-20261001-000000-2.partial", os.Getpid())
	a := startAgent(t, home, func(o *Options) { o.Reconcile = time.Hour })
	if _, err := os.Lstat(stale); err != nil {
		t.Fatalf("the stale partial went before the first reconcile: %v", err)
	}
	a.reconcile()
	if _, err := os.Lstat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the stale partial is still there after a reconcile (%v)", err)
	}
	if _, err := os.Lstat(ours); err != nil {
		t.Errorf("a partial of a live agent was removed: %v", err)
	}
}
