package supervisor

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// ledgerWriter starts an agent with no reconcile of its own and a writer
// its cache knows, and returns the store's worker and the writer's ref.
func ledgerWriter(t *testing.T) (*Agent, *worker, *hermestest.Writer, []holders.Process) {
	t.Helper()
	home, db := testHome(t)
	a := startAgent(t, home, func(o *Options) { o.Reconcile = time.Hour })
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300})
	waitHolder(t, a, db, w.Pid)
	known, _ := a.cache.Known(holders.Target{Path: db})
	if findPid(known.Holders, w.Pid) == nil {
		t.Fatalf("the cache does not list writer %d", w.Pid)
	}
	return a, a.worker(db), w, known.Holders
}

// A held open for writing froze the store's writers (the gate); a check
// that stopped one of them too and finds it no orphan lets go of its own
// stop. The writer stays stopped: the gate still holds the tool's open
// for it. Before the ledger, the check's SIGCONT undid the gate's stop,
// and the tool could write while that writer checkpointed into the main.
func TestThawLeavesAnotherPathsStop(t *testing.T) {
	_, wk, w, known := ledgerWriter(t)
	var gated gatedSeen
	var ref holders.ProcRef
	if err := wk.do(context.Background(), func() {
		gated = gatedSeen{at: time.Now(), frozen: wk.freezeWriters(known, 0, time.Now())}
		f, ok := gated.frozen[w.Pid]
		if !ok {
			t.Error("the gate's freeze did not stop the writer")
			return
		}
		ref = f.ref
	}); err != nil || t.Failed() {
		t.Fatal(err)
	}
	// SIGSTOP takes effect when the target next runs, SIGCONT at once in
	// kill(2): see it stopped before the check's claim is given back, so
	// the state read after the release shows whether a SIGCONT went out.
	hermestest.Eventually(t, "the gate's stop to take effect", 5*time.Second, func() bool {
		return hermestest.StateOf(w.Pid) == 'T'
	})
	if err := wk.do(context.Background(), func() {
		check := map[int]frozenProc{}
		if err := wk.stops.stop(ref); err != nil {
			t.Error(err)
			return
		}
		check[w.Pid] = stoppedAfter(ref, time.Now())
		wk.thawAll(check, "the confirming scan shows it holding no orphaned inode")
	}); err != nil || t.Failed() {
		t.Fatal(err)
	}
	if st := hermestest.StateOf(w.Pid); st != 'T' {
		t.Fatalf("writer in state %c after the check let go: the gate's stop was undone", st)
	}
	wk.releaseGated(gated, "it opened the main for writing and wrote nothing")
	hermestest.Eventually(t, "the writer to run once the last claim is given back", 5*time.Second, func() bool {
		return hermestest.StateOf(w.Pid) != 'T'
	})
	if n := wk.stops.claims(w.Pid); n != 0 {
		t.Errorf("%d claims left on the writer", n)
	}
}

// A rewrite seen and frozen for, whose check never comes because the
// store's worker ends first, leaves nobody stopped: the worker's end
// thaws every stop no incident took. Before, the pending rewrite's
// writers stayed stopped after the agent was gone.
func TestWorkerEndThawsAPendingRewritesWriters(t *testing.T) {
	a, wk, w, known := ledgerWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	closed := make(chan error, 1)
	if err := wk.do(ctx, func() {
		// On the worker, so no check takes the rewrite first; the
		// agent's Close follows at once.
		frozen := wk.freezeWriters(known, 0, time.Now())
		if _, ok := frozen[w.Pid]; !ok {
			t.Error("the rewrite's freeze did not stop the writer")
		}
		wk.pendRewrite(rewriteSeen{at: time.Now(), frozen: frozen, confirmed: true})
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
	if st := hermestest.StateOf(w.Pid); st == 'T' {
		t.Fatalf("the writer a pending rewrite froze is still stopped after the agent stopped")
	}
	if err := wk.stops.stop(holders.ProcRef{Pid: w.Pid}); err == nil {
		t.Error("the ended worker's ledger still stops processes")
	}
}
