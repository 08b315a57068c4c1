//go:build linux

package supervisor

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// A writer that opened the store after the last full scan is in no
// holder cache, so the cache-only fast freeze cannot stop it; until the
// check settled and scanned, it wrote on into the orphan (the long chaos
// runs: 99 ms after its sidecars were unlinked, about 100 ms after it
// opened the store). The lock table names it at once. The worker is held
// busy while the sidecars go, so only the freezes off the worker can stop
// it: without the lock pass nothing does until the worker is let go.
func TestFastFreezeFindsAWriterTheCacheDoesNotKnow(t *testing.T) {
	home, db := testHome(t)
	logs := new(hermestest.LogBuffer)
	a := startAgent(t, home, func(o *Options) {
		o.Reconcile = time.Hour // no full scan comes to know the second writer
		o.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	first := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 100, Linger: true, CheckpointEvery: -1})
	first.WaitAcks(t, 20)
	waitHolder(t, a, db, first.Pid)
	wk := a.worker(db)
	hermestest.Eventually(t, "the worker to have seen the sidecars", 20*time.Second, func() bool {
		f := wk.seen.Load()
		return f != nil && f.SHM.Ino != 0 && f.WAL.Ino != 0
	})
	second := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "s2", Rate: 100, Linger: true, CheckpointEvery: -1})
	second.WaitAcks(t, 5)
	if known, ok := a.cache.Known(holders.Target{Path: db}); ok && findPid(known.Holders, second.Pid) != nil {
		t.Fatal("setup: the holder cache already knows the second writer")
	}
	stopped := false
	if err := wk.do(context.Background(), func() {
		for _, s := range []string{"-wal", "-shm"} {
			if err := os.Remove(db + s); err != nil {
				t.Error(err)
			}
		}
		// Polled here, not with Eventually: a Fatal on the worker's
		// goroutine would never let the worker go.
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if stopped = hermestest.StateOf(second.Pid) == 'T'; stopped {
				return
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if !stopped {
		t.Fatal("the second writer, unknown to the holder cache, ran on for 20 s after its sidecars were unlinked while the worker was busy")
	}
	// The check that follows confirms it: the incident takes both, and
	// every row either acknowledged is in the healthy store once.
	inc := waitIncident(t, a, db, 60*time.Second, journal.StateResolved, journal.StateFailed)
	if inc.State != journal.StateResolved {
		t.Fatalf("incident %s: kind %s state %s error %q", inc.ID, inc.Kind, inc.State, inc.Detail.Error)
	}
	for _, pid := range []int{first.Pid, second.Pid} {
		if !slices.ContainsFunc(inc.Detail.Holders, func(h journal.HolderRecord) bool { return h.PID == pid }) {
			t.Errorf("incident %s does not hold pid %d (holders %+v)", inc.ID, pid, inc.Detail.Holders)
		}
	}
	waitExit(t, first, 10*time.Second)
	waitExit(t, second, 10*time.Second)
	healthy := dbRows(t, db)
	checkExactlyOnce(t, first.Acks(t), healthy, time.Time{}, time.Time{})
	checkExactlyOnce(t, second.Acks(t), healthy, time.Time{}, time.Time{})
}
