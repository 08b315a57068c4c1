package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// observe never signals: the writer keeps committing into the orphan, and
// its rows are captured once it exits on its own.
func TestObservePolicy(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, func(o *Options) { o.Policies.Replaced = incident.PolicyObserve })
	w := startHeldWriter(t, a, db)
	renamed := hermestest.RestoreOver(t, db)
	inc := waitIncident(t, a, db, 10*time.Second, journal.StatePinned, journal.StateReleased)
	n := len(w.Acks(t))
	hermestest.Eventually(t, "the observed writer to go on committing", 10*time.Second, func() bool { return len(w.Acks(t)) > n+20 })
	if s := hermestest.StateOf(w.Pid); s == 'T' {
		t.Fatal("observe stopped the writer")
	}
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	inc = waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if inc.State != journal.StateResolved {
		t.Fatalf("incident %s ended %s: %s", inc.ID, inc.State, inc.Detail.Error)
	}
	if miss := missingAcks(w.Acks(t), captureRows(t, inc.Detail.CapturePath)); len(miss) > 0 {
		t.Fatalf("%d acknowledged rows missing from the capture", len(miss))
	}
	// Everything the observed writer committed into the orphan after the
	// restore is replayed into the new generation, once.
	checkExactlyOnce(t, w.Acks(t), dbRows(t, db), renamed, time.Time{})
	if n := countAfter(w.Acks(t), renamed); n < 20 {
		t.Fatalf("only %d rows after the restore; the check proves little", n)
	}
}

func countAfter(acks []hermestest.Ack, t0 time.Time) int {
	n := 0
	for _, a := range acks {
		if time.Unix(0, int64(a.Timestamp*1e9)).After(t0) {
			n++
		}
	}
	return n
}

// hold keeps the writer frozen until an operator releases it through the
// control socket.
func TestHoldPolicyAndRelease(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, func(o *Options) { o.Policies.Replaced = incident.PolicyHold })
	w := startHeldWriter(t, a, db)
	hermestest.RestoreOver(t, db)
	inc := waitIncident(t, a, db, 10*time.Second, journal.StatePinned)
	hermestest.Eventually(t, "the writer to be stopped", 5*time.Second, func() bool { return hermestest.StateOf(w.Pid) == 'T' })
	a.reconcile() // a full reconcile must not release a held incident
	if err := a.worker(db).do(context.Background(), func() {}); err != nil {
		t.Fatal(err)
	}
	if s := hermestest.StateOf(w.Pid); s != 'T' {
		t.Fatalf("held writer is in state %c after a reconcile", s)
	}
	if cur, _ := a.journal.GetIncident(context.Background(), inc.ID); cur.State != journal.StatePinned {
		t.Fatalf("held incident moved to %s", cur.State)
	}

	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", a.SocketPath())
	}}}
	resp, err := c.Post("http://agent/v1/incidents/"+inc.ID+"/release", "application/json", bytes.NewBufferString(`{"how":"kill"}`))
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("release: %d %v", resp.StatusCode, body)
	}
	waitExit(t, w, 10*time.Second)
	if !killedBy(w.Cmd.ProcessState, syscall.SIGKILL) {
		t.Fatalf("writer ended with %v, want SIGKILL", w.Cmd.ProcessState)
	}
	inc = waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if inc.State != journal.StateResolved {
		t.Fatalf("incident ended %s: %s", inc.State, inc.Detail.Error)
	}
	if miss := missingAcks(w.Acks(t), captureRows(t, inc.Detail.CapturePath)); len(miss) > 0 {
		t.Fatalf("%d acknowledged rows missing from the capture", len(miss))
	}
}

func TestSecondAgentRefuses(t *testing.T) {
	home, _ := testHome(t)
	a := startAgent(t, home, nil)
	_, err := Start(context.Background(), Options{StateDir: a.opts.StateDir, Socket: "-", Logger: a.opts.Logger})
	if !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second agent on %s: %v, want ErrAlreadyRunning", a.opts.StateDir, err)
	}
}

// A journaled holder whose pid now names another process (same pid,
// different start time) is never signalled on resume.
func TestResumeNeverSignalsARecycledPid(t *testing.T) {
	home, db := testHome(t)
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })

	stateDir := t.TempDir() + "/state"
	if err := control.PrepareStateDir(stateDir); err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(context.Background(), stateDir+"/"+journal.FileName, nil)
	if err != nil {
		t.Fatal(err)
	}
	inc, err := j.OpenIncident(context.Background(), journal.Incident{Store: db, Profile: "default", Home: home, Kind: journal.KindReplaced,
		State: journal.StateFrozen, Policy: string(incident.PolicyKill),
		Detail: journal.IncidentDetail{Holders: []journal.HolderRecord{{PID: sleeper.Process.Pid, StartTicks: 1, Frozen: true}}}})
	if err != nil {
		t.Fatal(err)
	}
	j.Close()

	a := startAgent(t, home, func(o *Options) { o.StateDir = stateDir })
	got := waitIncident(t, a, db, 10*time.Second, journal.StateFailed, journal.StateResolved)
	if got.ID != inc.ID || got.State != journal.StateFailed {
		t.Fatalf("incident %s: %s (%s)", got.ID, got.State, got.Detail.Error)
	}
	if s := hermestest.StateOf(sleeper.Process.Pid); s != 'S' && s != 'R' {
		t.Fatalf("the process now at pid %d was touched: state %c", sleeper.Process.Pid, s)
	}
}

// An agent that stops while an incident holds a writer frozen leaves it
// frozen; the next agent resumes that incident before its first look at
// the store. A check that came first took the frozen orphan for a new
// one, and a second incident captured and replayed the same rows again
// (chaos seed 10: 3 rows duplicated).
func TestResumedIncidentBeforeFirstCheck(t *testing.T) {
	for round := range 3 {
		home, db := testHome(t)
		var opts Options
		a := startAgent(t, home, func(o *Options) {
			o.Policies = incident.PolicySet{Replaced: incident.PolicyHold, SidecarLost: incident.PolicyHold, Mispaired: incident.PolicyHold}
			opts = *o
		})
		w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300})
		waitHolder(t, a, db, w.Pid)
		hermestest.RenameFreshOver(t, db)
		inc := waitIncident(t, a, db, 10*time.Second, journal.StatePinned)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if s := hermestest.StateOf(w.Pid); s != 'T' {
			t.Fatalf("round %d: the held writer is %c after the agent stopped, want still stopped", round, s)
		}
		a2, err := Start(ctx, opts)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		a2.reconcile()
		if err := a2.worker(db).do(context.Background(), func() {}); err != nil {
			t.Fatal(err)
		}
		incs, err := a2.journal.ListIncidents(context.Background(), journal.ListOptions{Store: db})
		if err != nil || len(incs) != 1 || incs[0].ID != inc.ID {
			t.Fatalf("round %d: incidents after the restart %+v (%v), want only %s", round, incs, err, inc.ID)
		}
		if err := a2.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		w.Kill()
	}
}
