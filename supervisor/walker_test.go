package supervisor

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// Idle stores cost nothing between events: no worker has a timer armed,
// and a reconcile checks none of them. A change no event reported (the
// watches are off here) is still found by the next reconcile, which then
// checks that store alone.
func TestWalkerChecksOnlyWhatChanged(t *testing.T) {
	home := scaleHome(t, 12)
	a := startAgent(t, home, func(o *Options) { o.Reconcile, o.DisableNotify, o.Guard = time.Hour, true, true })
	firstChecksDone(t, a, 13)
	ctx := context.Background()
	for _, w := range a.allWorkers() {
		var next time.Time
		if err := w.do(ctx, func() { next = w.wake(time.Now()) }); err != nil {
			t.Fatal(err)
		}
		if !next.IsZero() {
			t.Errorf("idle store %s wakes by itself at %v", w.st.Path, next)
		}
	}
	for range 3 {
		a.reconcile()
	}
	if a.walk.checked != 0 {
		t.Fatalf("3 reconciles of idle stores checked %d stores, want 0", a.walk.checked)
	}

	db := filepath.Join(home, "profiles", "p00003", "state.db")
	before := *a.worker(db).seen.Load()
	hermestest.RenameFreshOver(t, db)
	a.reconcile()
	if a.walk.checked != 1 {
		t.Fatalf("a reconcile after one store was replaced checked %d stores, want 1", a.walk.checked)
	}
	if seen := a.worker(db).seen.Load(); seen == nil || seen.Main == before.Main || seen.Main.IsZero() {
		t.Fatalf("the walk's check did not see the new main file: %+v (was %+v)", seen, before)
	}
	a.reconcile()
	if a.walk.checked != 1 {
		t.Fatalf("the next reconcile checked %d stores in all, want still 1", a.walk.checked)
	}
}
