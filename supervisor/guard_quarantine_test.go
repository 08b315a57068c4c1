package supervisor

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// A mispaired incident runs inside the check that found it: it moves the
// old generation's -wal/-shm into its capture, and when the frame cut
// leaves nothing to replay it resolves before that check ends, so the
// worker last saw the store with the sidecars that are gone. A gateway
// that opens the store next creates new ones: to the worker that is
// "sidecars replaced", not created, and main's early arm (at a
// sidecar-created event) did not apply; the guard waited for the full
// scan, and a short-lived connection closed as the unguarded last closer
// first (TestToolTable "mv aside, then cp" under load: the guard never
// armed again). Here every full scan waits (scanMu held) from before the
// gateway opens the store: the guard must arm on its sidecars all the
// same, since it holds nothing the check could still need.
func TestGuardArmsOnSidecarsAfterQuarantine(t *testing.T) {
	home, db := testHome(t)
	resolving, goOn := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hooks := incident.Hooks{BeforeJournal: func(_ string, _, to journal.State, _ string) {
		if to == journal.StateResolved {
			once.Do(func() {
				close(resolving)
				<-goOn
			})
		}
	}}
	var logs hermestest.LogBuffer
	a := startAgent(t, home, func(o *Options) {
		o.Guard, o.Reconcile, o.Hooks = true, time.Hour, hooks
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300, Count: 30, Linger: true})
	waitHolder(t, a, db, w.Pid)
	w.WaitAcks(t, 30) // nothing after the cut: no replay opens the store
	waitGuard(t, a, db, control.GuardArmed, 10*time.Second)
	hermestest.RenameFreshOver(t, db) // the main only: mispaired

	select {
	case <-resolving:
	case <-time.After(30 * time.Second):
		t.Fatal("the mispaired incident did not come to resolve")
	}
	// The incident's check has not ended yet: the worker still has the
	// quarantined sidecars as the store's.
	a.scanMu.Lock()
	defer a.scanMu.Unlock()
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "after", Count: 5, Linger: true})
	w2.WaitAcks(t, 5)
	main, shm := fileID(t, db), fileID(t, db+"-shm")
	close(goOn)
	hermestest.Eventually(t, "the guard armed on the gateway's sidecars", 10*time.Second, func() bool {
		for _, r := range logs.Records(t, EventGuardArmed) {
			if r["main"] == main.String() && r["shm"] == shm.String() {
				return true
			}
		}
		return false
	})
	waitGuard(t, a, db, control.GuardArmed, 10*time.Second)
	waitGuarded(t, main, shm)
}
