package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/supervisor"
)

// startAgent runs agentd in this process on home (socket under a short
// directory, 300 ms reconcile, 5 s terminate grace), as mod adjusts it.
// stop closes the agent once; the cleanup calls it too.
func startAgent(t *testing.T, home string, mod func(*supervisor.Options)) (a *supervisor.Agent, stateDir string, stop func()) {
	t.Helper()
	env := hermestest.NewAgentEnv(t, home)
	o := supervisor.Options{
		StateDir:  env.StateDir,
		Socket:    env.Socket,
		Reconcile: 300 * time.Millisecond,
		Discover:  store.DiscoverOptions{Getenv: env.Getenv, UserHome: "/nonexistent", CurrentUserOnly: true},
		Policies:  incident.PolicySet{Grace: 5 * time.Second},
		Logger:    env.Logger,
	}
	if mod != nil {
		mod(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := supervisor.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := a.Close(ctx); err != nil {
				t.Errorf("agent close: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return a, o.StateDir, stop
}

func incidentsJSON(t *testing.T, vars map[string]string, args ...string) []journal.Incident {
	t.Helper()
	r := ctl(t, vars, append([]string{"incidents", "--json"}, args...)...)
	if r.code != exitOK {
		t.Fatalf("incidents: exit %d: %s", r.code, r.stderr)
	}
	var incs []journal.Incident
	if err := json.Unmarshal([]byte(r.stdout), &incs); err != nil {
		t.Fatalf("incidents --json: %v\n%s", err, r.stdout)
	}
	return incs
}

// The whole operator loop against a running agent: status shows the
// daemon and the held incident, incident show tells its story, release
// --kill ends the frozen writer, and the incident resolves.
func TestDaemonHoldAndRelease(t *testing.T) {
	db := hermestest.NewStore(t)
	home := filepath.Dir(db)
	a, stateDir, stop := startAgent(t, home, func(o *supervisor.Options) { o.Policies.Replaced = incident.PolicyHold })
	vars := map[string]string{socketEnv: a.SocketPath()}

	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300})
	var st control.Status
	hermestest.Eventually(t, "agentd to report the writer as a holder", 20*time.Second, func() bool {
		st = decodeStatus(t, ctl(t, vars, "status", "--json"))
		p := holderOf(storeOf(t, st, db), w.Pid)
		return p != nil && len(heldRoles(p)) == 3
	})
	if !st.Daemon.Running || st.Daemon.PID != os.Getpid() || st.Daemon.Socket != a.SocketPath() || st.Daemon.StateDir != stateDir {
		t.Fatalf("daemon = %+v", st.Daemon)
	}
	r := ctl(t, vars, "status", "--home", home)
	if !strings.Contains(r.stdout, fmt.Sprintf("daemon running, pid %d", os.Getpid())) {
		t.Errorf("status text lacks the daemon line:\n%s", r.stdout)
	}
	if st := decodeStatus(t, ctl(t, vars, "status", "--json", "--home", t.TempDir())); len(st.Stores) != 0 ||
		len(st.Problems) != 1 || !strings.Contains(st.Problems[0].Error, "not watched") {
		t.Errorf("status of a home the daemon does not watch: %+v", st)
	}
	if r := ctl(t, vars, "incidents"); r.code != exitOK || !strings.Contains(r.stdout, "No open incidents.") {
		t.Errorf("incidents before any: exit %d %q %q", r.code, r.stdout, r.stderr)
	}

	renameFreshOver(t, db)
	var inc journal.Incident
	hermestest.Eventually(t, "a pinned incident", 15*time.Second, func() bool {
		incs := incidentsJSON(t, vars)
		if len(incs) == 1 && incs[0].State == journal.StatePinned {
			inc = incs[0]
			return true
		}
		return false
	})
	if inc.Kind != journal.KindReplaced || inc.Policy != string(incident.PolicyHold) || inc.Store != db {
		t.Fatalf("incident %+v", inc)
	}
	hermestest.Eventually(t, "the writer to be stopped", 5*time.Second, func() bool { return hermestest.StateOf(w.Pid) == 'T' })

	r = ctl(t, vars, "incidents")
	if !strings.Contains(r.stdout, inc.ID) || !strings.Contains(r.stdout, "pinned") || !strings.Contains(r.stdout, "hold") {
		t.Errorf("incidents text:\n%s", r.stdout)
	}
	r = ctl(t, vars, "status")
	if !strings.Contains(r.stdout, "open incidents:") || !strings.Contains(r.stdout, inc.ID) || r.code != exitRefused {
		t.Errorf("status with a held incident (exit %d):\n%s", r.code, r.stdout)
	}
	r = ctl(t, vars, "incident", "show", inc.ID)
	for _, want := range []string{"Incident " + inc.ID, "replaced", "pinned", "hold", db, fmt.Sprint(w.Pid), "steps:", "→ pinned"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("incident show lacks %q:\n%s%s", want, r.stdout, r.stderr)
		}
	}
	r = ctl(t, vars, "incident", "show", "--json", inc.ID)
	var view control.IncidentView
	if err := json.Unmarshal([]byte(r.stdout), &view); err != nil || view.Incident.ID != inc.ID || len(view.Steps) == 0 {
		t.Fatalf("incident show --json (exit %d): %v\n%s", r.code, err, r.stdout)
	}
	if r := ctl(t, vars, "incident", "show", "20000101T000000Z-000000"); r.code != exitError || !strings.Contains(r.stderr, "no incident") {
		t.Errorf("unknown incident: exit %d %q", r.code, r.stderr)
	}
	if r := ctl(t, vars, "release", inc.ID); r.code != exitUsage {
		t.Errorf("release without a decision: exit %d", r.code)
	}
	if r := ctl(t, vars, "release", inc.ID, "--kill", "--resume"); r.code != exitUsage {
		t.Errorf("release with two decisions: exit %d", r.code)
	}
	if hermestest.StateOf(w.Pid) != 'T' {
		t.Fatalf("the writer is no longer stopped before the release")
	}

	r = ctl(t, vars, "release", inc.ID, "--kill")
	if r.code != exitOK || !strings.Contains(r.stdout, "released (kill)") {
		t.Fatalf("release --kill: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	select {
	case <-w.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("writer %d still there 10s after release --kill", w.Pid)
	}
	if ws, ok := w.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("writer ended with %v, want SIGKILL", w.Cmd.ProcessState)
	}
	hermestest.Eventually(t, "the incident to resolve", 30*time.Second, func() bool {
		incs := incidentsJSON(t, vars, "--all")
		return len(incs) == 1 && incs[0].State.Terminal()
	})
	if incs := incidentsJSON(t, vars, "--all"); incs[0].State != journal.StateResolved {
		t.Fatalf("incident ended %s: %s", incs[0].State, incs[0].Detail.Error)
	}
	if incs := incidentsJSON(t, vars); len(incs) != 0 {
		t.Errorf("open incidents after resolution: %+v", incs)
	}
	if r := ctl(t, vars, "release", inc.ID, "--resume"); r.code != exitError || !strings.Contains(r.stderr, inc.ID) {
		t.Errorf("release of a resolved incident: exit %d %q", r.code, r.stderr)
	}
	r = ctl(t, vars, "queue", "--json")
	var jobs []journal.Job
	if err := json.Unmarshal([]byte(r.stdout), &jobs); r.code != exitOK || err != nil {
		t.Errorf("queue --json: exit %d %v %q", r.code, err, r.stdout)
	}

	// Without the daemon, the journal answers, labelled as such.
	stop()
	vars = map[string]string{socketEnv: a.SocketPath()}
	r = ctl(t, vars, "incidents", "--all", "--state-dir", stateDir)
	if r.code != exitOK || !strings.Contains(r.stdout, "from the journal") || !strings.Contains(r.stdout, inc.ID) || !strings.Contains(r.stdout, "resolved") {
		t.Errorf("incidents from the journal: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = ctl(t, vars, "incident", "show", inc.ID, "--state-dir", stateDir, "--json")
	view = control.IncidentView{}
	if err := json.Unmarshal([]byte(r.stdout), &view); err != nil || view.Incident.State != journal.StateResolved ||
		!strings.Contains(r.stderr, "from the journal") {
		t.Errorf("incident show from the journal: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if r := ctl(t, vars, "queue", "--state-dir", stateDir); r.code != exitOK || !strings.Contains(r.stdout, "from the journal") {
		t.Errorf("queue from the journal: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := ctl(t, vars, "release", inc.ID, "--kill"); r.code != exitError || !strings.Contains(r.stderr, "daemon not running") {
		t.Errorf("release without agentd: exit %d %q", r.code, r.stderr)
	}
	st = decodeStatus(t, ctl(t, vars, "status", "--json", "--home", home))
	if st.Daemon.Running || st.Daemon.Error != "daemon not running" {
		t.Errorf("status after the agent stopped: daemon %+v", st.Daemon)
	}
}
