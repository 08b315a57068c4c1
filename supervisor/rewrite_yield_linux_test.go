//go:build linux

package supervisor

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/modwatch"
)

// holdWorker runs a function on w's worker that blocks until the returned
// release is called (at the latest when the test ends): what is queued
// for the worker meanwhile waits behind it.
func holdWorker(t *testing.T, w *worker) (release func()) {
	t.Helper()
	held, rel := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- w.do(context.Background(), func() { close(held); <-rel }) }()
	<-held
	released := false
	release = func() {
		if released {
			return
		}
		released = true
		close(rel)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(release)
	return release
}

// A replay claimed while the rewrite gate holds a tool's open of the main
// for writing registers after the gate's yield found nothing to end, the
// gap ci6 closed for changes at the paths. It must not run beside the
// tool (its rows would go into the WAL the tool's write mismatches, and
// it would wait on any write lock a writer frozen for the tool holds): it
// waits, no attempt counted, and runs once the tool closed the main
// without writing. Before the gate's hold refused a replay at its start
// (replayMayStart), this job ran to the end with the tool's open held.
func TestReplayWaitsForAHeldOpen(t *testing.T) {
	needFanotify(t)
	home, db := testHome(t)
	// No reconcile walk: its checks would queue on the held worker.
	a := startAgent(t, home, func(o *Options) { o.Guard, o.Reconcile = true, time.Hour })
	if !a.rw.mw.Gated() {
		t.Skip("no fanotify permission events: opens are not held here")
	}
	wr := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 5, Linger: true, CheckpointEvery: -1})
	wr.WaitAcks(t, 5)
	waitHolder(t, a, db, wr.Pid)
	w := a.worker(db)
	release := holdWorker(t, w)

	tool := exec.Command("sh", "-c", "exec 3>>state.db; echo opened; read x; exit 0")
	tool.Dir = home
	in, out := hermestest.StartPiped(t, tool)
	if l := hermestest.FirstLine(t, "tool", out, 30*time.Second); l != "opened\n" && l != "opened" {
		t.Fatalf("tool said %q", l)
	}
	w.rws.mu.Lock()
	_, gated := w.rws.gated[tool.Process.Pid]
	w.rws.mu.Unlock()
	if !gated {
		t.Fatalf("the tool's open (pid %d) was not held by the gate", tool.Process.Pid)
	}
	job := queueReplay(t, a, db)
	hermestest.Eventually(t, "the replay to be queued on the worker", 20*time.Second, func() bool {
		return len(w.reqC) > 0
	})
	release()
	wantYielded(t, a, job)

	in.Close() // the tool closes the main without writing
	if err := tool.Wait(); err != nil {
		t.Fatalf("tool: %v", err)
	}
	hermestest.Eventually(t, "the replay to run once the tool is gone", 30*time.Second, func() bool {
		j, err := a.journal.GetJob(context.Background(), job.ID)
		return err == nil && j.State == journal.JobDone
	})
	if st := hermestest.StateOf(wr.Pid); st == 'T' {
		t.Fatal("the writer is left stopped")
	}
}

// The unprivileged judge (modwatch without pids) records a rewrite it
// found, and queues its check, before it yields the running replay: a
// replay that registers after the yield then finds both (replayMayStart,
// checkFirst). It used to yield first, leaving a replay that registered
// in between nothing to refuse it. The judge is called as modwatch's
// inotify fallback calls it; the yield is observed by the replay's
// cancel, which is where it ends a replay.
func TestUnattributedWriteRecordsBeforeItYields(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, func(o *Options) { o.Guard, o.Reconcile = true, time.Hour })
	wr := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 5})
	wr.WaitAcks(t, 5)
	waitExit(t, wr, 10*time.Second)
	w := a.worker(db)
	h, st, err := readMainHeader(w.st)
	if err != nil {
		t.Fatal(err)
	}
	// The last check saw a later change counter: the main's has gone
	// back, as a restored backup's does.
	h.FileChangeCounter += 5
	mark, _, _ := walPage1Counter(w.st)
	w.setLastHdr(st, h, mark)
	release := holdWorker(t, w) // keeps the check the judge queues queued
	defer release()

	var atYield struct {
		pending int
		kicked  bool
		refused string
	}
	yielded := false
	w.replayMu.Lock()
	w.replayCancel = func(error) {
		yielded = true
		w.rws.mu.Lock()
		atYield.pending = len(w.rws.pending)
		w.rws.mu.Unlock()
		atYield.kicked = len(w.kickC) > 0
		atYield.refused = w.rewriteUnhandled()
	}
	w.replayMu.Unlock()
	t.Cleanup(func() {
		w.replayMu.Lock()
		w.replayCancel = nil
		w.replayMu.Unlock()
	})

	w.unattributedWrite(modwatch.Event{Op: modwatch.Write, ID: st.ID, At: time.Now()})
	if !yielded {
		t.Fatal("the write the judge found unexplained yielded no replay")
	}
	if atYield.pending != 1 || !atYield.kicked || atYield.refused == "" {
		t.Fatalf("at the yield: %d rewrites pending, check queued %t, a replay starting now refused for %q; want 1, true and a reason",
			atYield.pending, atYield.kicked, atYield.refused)
	}
}
