package supervisor

import (
	"context"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// TestStaleTriggerDoesNotPredateTheChange: a check set off by a trigger
// older than the change it finds (the reconcile walker's scan time, an
// earlier coalesced kick) journals the change as seen no earlier than the
// worker's last read that found the store unchanged. Before, it took the
// trigger's time: the restore was put an hour before the rename here, and
// 433 ms before it in benchscale, with holder.frozen latencies to match.
func TestStaleTriggerDoesNotPredateTheChange(t *testing.T) {
	home, db := testHome(t)
	// No watches, no reconcile: only this test's kicks check the store.
	a := startAgent(t, home, func(o *Options) { o.Reconcile, o.DisableNotify = time.Hour, true })
	startHeldWriter(t, a, db)
	wk := a.worker(db)
	if wk == nil {
		t.Fatalf("no worker for %s", db)
	}
	ctx := context.Background()
	// The first check takes in the writer's sidecars; the second finds
	// the store as the worker knows it.
	if err := wk.do(ctx, func() { wk.check(time.Now()) }); err != nil {
		t.Fatal(err)
	}
	unchanged := time.Now()
	if err := wk.do(ctx, func() { wk.check(unchanged) }); err != nil {
		t.Fatal(err)
	}
	hermestest.RenameFreshOver(t, db)
	wk.kick(unchanged.Add(-time.Hour))
	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if got := inc.Detail.ReplacedAt; got.Before(unchanged) {
		t.Fatalf("incident %s (%s) journaled the replacement at %v, %v before the check that found the store unchanged",
			inc.ID, inc.Kind, got, unchanged.Sub(got))
	}
	steps, err := a.journal.Steps(ctx, inc.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		if s.Name == journal.StepDetected && s.At.Before(unchanged) {
			t.Fatalf("incident %s detected at %v, before the check that found the store unchanged (%v)", inc.ID, s.At, unchanged)
		}
	}
}

// Issue 18's replayed-back rows (chaos seed 2): the worker was busy for
// seconds with a divert, a kick queued meanwhile kept its time, and the
// rename that came later was dated at the worker's last read before it
// got busy. The rows the orphan committed in between counted as
// committed after the replacement and were replayed back. The change is
// dated by the first event at the store's paths since the last check.
func TestQueuedKickDoesNotPredateTheChange(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, func(o *Options) { o.Reconcile = time.Hour })
	startHeldWriter(t, a, db)
	wk := a.worker(db)
	if wk == nil {
		t.Fatalf("no worker for %s", db)
	}
	ctx := context.Background()
	if err := wk.do(ctx, func() { wk.check(time.Now()) }); err != nil {
		t.Fatal(err)
	}
	// The worker is busy from here on, as with a long divert; its last
	// read that found the store unchanged is as old as the busy step.
	held, release := make(chan struct{}), make(chan struct{})
	blocked := make(chan error, 1)
	go func() {
		blocked <- wk.do(ctx, func() {
			wk.check(time.Now())
			wk.unchangedAt = wk.unchangedAt.Add(-time.Minute)
			close(held)
			<-release
		})
	}()
	<-held
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
	})
	wk.kick(time.Now().Add(-time.Minute)) // queued behind the busy step
	renamed := time.Now()
	hermestest.RenameFreshOver(t, db)
	hermestest.Eventually(t, "the rename's event to reach the worker", 20*time.Second, func() bool {
		return wk.eventAt.Load() != 0
	})
	close(release)
	released = true
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	// File times are coarse (a clock tick): a few ms before renamed.
	if got := inc.Detail.ReplacedAt; got.Before(renamed.Add(-50 * time.Millisecond)) {
		t.Fatalf("incident %s (%s) journaled the replacement at %v, %v before the rename",
			inc.ID, inc.Kind, got, renamed.Sub(got))
	}
}
