package supervisor

import (
	"sync"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// While an incident's divert is in flight the store's worker goes on: a
// writer that opens the restored store gets its generation guarded, so no
// last closer can unlink its WAL meanwhile. The divert ran on the worker
// until issue 18's long runs: a 1.8 s divert of a 5.8 MB capture left the
// new generation unguarded, a sqlite3 read orphaned its WAL, and a 5 s one
// let container writers commit into an unlinked WAL for 400 ms before
// anything froze them (a corrupt store).
func TestWorkerGuardsWhileADivertRuns(t *testing.T) {
	home, db := testHome(t)
	inDivert, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hooks := incident.Hooks{InDivert: func(string) { once.Do(func() { close(inDivert); <-proceed }) }}
	a := startAgent(t, home, func(o *Options) {
		o.Guard, o.Policies.Replaced, o.Hooks = true, incident.PolicyKill, hooks
	})
	var release sync.Once
	letGo := func() { release.Do(func() { close(proceed) }) }
	t.Cleanup(letGo)
	w := startHeldWriter(t, a, db)
	w.AcksGrow(t, 10)
	hermestest.RestoreOver(t, db)
	select {
	case <-inDivert:
	case <-time.After(30 * time.Second):
		t.Fatal("the incident never began its divert")
	}
	waitExit(t, w, 10*time.Second)

	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "after", Rate: 100})
	w2.WaitAcks(t, 3)
	main, shm := fileID(t, db), fileID(t, db+"-shm")
	hermestest.Eventually(t, "the new generation guarded while the divert is held", 10*time.Second, func() bool {
		return guarded(t, main, shm)
	})
	if inc := onlyIncident(t, a.opts.StateDir, db); inc.State != journal.StateCaptured {
		t.Fatalf("incident %s while its divert is held, want captured", inc.State)
	}
	letGo()
	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed, journal.StateUnrecoverable)
	if inc.State != journal.StateResolved {
		t.Fatalf("incident %s %s (%s)", inc.ID, inc.State, inc.Detail.Error)
	}
	if st := a.guardStatus(db); st.State != control.GuardArmed {
		t.Fatalf("guard %+v after the incident, want armed", st)
	}
	if err := w2.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}
