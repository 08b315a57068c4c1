package supervisor

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// TestResumedIncidentBeforeFirstCheck failed once under load: the writer
// a held incident owned was running after the agent stopped. A fast
// freeze on a kicker's goroutine had stopped it again after the check
// that opened the incident took the early freezes, and the worker's end
// thawed every early freeze it still had. Here that freeze is put in the
// worker's early set as the race leaves it; the writer must stay stopped
// (before the fix it was thawed in 4 runs of 10: in the others a check
// still queued took the freeze before the worker ended).
func TestWorkerEndKeepsAnIncidentsWriterStopped(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, func(o *Options) {
		o.Policies = incident.PolicySet{Replaced: incident.PolicyHold, SidecarLost: incident.PolicyHold, Mispaired: incident.PolicyHold}
	})
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300})
	waitHolder(t, a, db, w.Pid)
	hermestest.RenameFreshOver(t, db)
	waitIncident(t, a, db, 10*time.Second, journal.StatePinned)
	ticks, err := holders.StartTicks(w.Pid)
	if err != nil {
		t.Fatal(err)
	}
	wk := a.worker(db)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// On the worker, so no check takes it first; the agent's Close
	// follows at once, as the end came in the chaos run.
	closed := make(chan error, 1)
	if err := wk.do(ctx, func() {
		wk.earlyMu.Lock()
		if wk.early == nil {
			wk.early = map[int]frozenProc{}
		}
		wk.early[w.Pid] = stoppedAfter(holders.ProcRef{Pid: w.Pid, StartTicks: ticks}, time.Now())
		wk.earlyMu.Unlock()
		go func() { closed <- a.Close(ctx) }()
		for !wk.stopping.Load() && ctx.Err() == nil {
			runtime.Gosched() // the worker ends on its next turn
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if s := hermestest.StateOf(w.Pid); s != 'T' {
		t.Fatalf("the writer the held incident owns is %c after the agent stopped, want still stopped", s)
	}
}
