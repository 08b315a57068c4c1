package main

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/supervisor"
)

// agentLog keeps an in-process agent's log lines for the test to wait on,
// and shows them in the test's log.
type agentLog struct {
	mu    sync.Mutex
	t     *testing.T
	on    bool
	lines []string
}

func (l *agentLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimRight(string(b), "\n")
	l.lines = append(l.lines, s)
	if l.on {
		l.t.Log(s)
	}
	return len(b), nil
}

// after returns the lines logged after the first one containing mark.
func (l *agentLog) after(mark string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, s := range l.lines {
		if strings.Contains(s, mark) {
			return append([]string(nil), l.lines[i+1:]...)
		}
	}
	return nil
}

func (l *agentLog) has(subs ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
next:
	for _, s := range l.lines {
		for _, sub := range subs {
			if !strings.Contains(s, sub) {
				continue next
			}
		}
		return true
	}
	return false
}

// startRestoreAgent runs agentd in this process on home, with metrics (to
// see its reconciles) and its log kept.
func startRestoreAgent(t *testing.T, home string, pol incident.PolicySet) (*supervisor.Agent, *supervisor.Metrics, *agentLog) {
	t.Helper()
	lg := &agentLog{t: t, on: true}
	t.Cleanup(func() { lg.mu.Lock(); lg.on = false; lg.mu.Unlock() })
	m := supervisor.NewMetrics()
	a, _, _ := startAgent(t, home, func(o *supervisor.Options) {
		o.Reconcile, o.Metrics = 200*time.Millisecond, m
		pol.Grace = o.Policies.Grace
		o.Policies = pol
		o.Logger = slog.New(slog.NewTextHandler(lg, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	return a, m, lg
}

// lastReconcile is the agent's last full reconcile (re-discover, re-scan
// every process, re-check every store), from its metrics.
func lastReconcile(t *testing.T, m *supervisor.Metrics) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasSuffix(mf.GetName(), "last_reconcile_timestamp_seconds") && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// settled waits until the agent has run two full reconciles that began
// after since: by then every worker has re-checked its store at least
// once after the restore, and any incident it would open is open.
func settled(t *testing.T, m *supervisor.Metrics, since time.Time) {
	t.Helper()
	mark := float64(since.UnixNano()) / 1e9
	var first float64
	hermestest.Eventually(t, "two reconciles after the restore", 30*time.Second, func() bool {
		r := lastReconcile(t, m)
		if r > mark && first == 0 {
			first = r
		}
		return first != 0 && r > first
	})
}

func noIncidents(t *testing.T, a *supervisor.Agent) {
	t.Helper()
	incs, err := a.Journal().ListIncidents(context.Background(), journal.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(incs) != 0 {
		t.Fatalf("the daemon raised %d incident(s) for an intended restore: %+v", len(incs), incs)
	}
}

// Acceptance: with agentd running, restore --stop-writers into a store a
// writer holds: the restore is announced, the writer sees the restored
// rows afterwards in the same inode, integrity_check is ok, and the
// daemon raises no incident.
func TestRestoreDaemonStopWriters(t *testing.T) {
	f := newRestoreFixture(t, 0)
	a, m, lg := startRestoreAgent(t, f.home, incident.PolicySet{})
	vars := map[string]string{socketEnv: a.SocketPath()}
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: f.db, Rate: 300})
	w.WaitAcks(t, 10)
	hermestest.VacuumInto(t, f.db, f.backup+".2")
	seq := backupSeq(t, f.backup+".2")
	w.WaitAcks(t, int(seq)+30)
	hermestest.Eventually(t, "agentd to see the writer", 20*time.Second, func() bool {
		p := holderOf(storeOf(t, decodeStatus(t, ctl(t, vars, "status", "--json")), f.db), w.Pid)
		return p != nil && len(heldRoles(p)) == 3
	})
	ino := inode(t, f.db)

	r := ctl(t, vars, "restore", "--profile", "default", "--home", f.home, "--stop-writers", "--release", "resume", f.backup+".2")
	end := time.Now()
	if r.code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	mustContain(t, "stdout", r.stdout, "agentd (pid "+strconv.Itoa(os.Getpid())+") knows this restore is intended",
		"writer pid "+strconv.Itoa(w.Pid)+" resumed")
	if inode(t, f.db) != ino {
		t.Fatal("inode changed")
	}
	n := len(w.Acks(t))
	w.WaitAcks(t, n+20)
	settled(t, m, end)
	noIncidents(t, a)
	if !lg.has("event="+supervisor.EventRestoreBegin, "mode=online") || !lg.has("event="+supervisor.EventRestoreEnd, "result=done") {
		t.Fatal("the agent did not log the restore's begin and end")
	}
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	sawRestore(t, f.db, seq, w.Acks(t), "s1")
	if s := integrityOf(t, f.db); s != "ok" {
		t.Fatalf("integrity_check: %s", s)
	}
}

// With agentd running, publishing over a broken store (a new inode at
// the path) is a generation change the daemon sees, and takes as the
// restore's: no incident.
func TestRestoreDaemonPublish(t *testing.T) {
	f := newRestoreFixture(t, 4)
	writeFile(t, f.db, "this store was damaged")
	os.Remove(f.db + "-wal")
	os.Remove(f.db + "-shm")
	a, m, lg := startRestoreAgent(t, f.home, incident.PolicySet{})
	vars := map[string]string{socketEnv: a.SocketPath()}
	r := ctl(t, vars, "restore", "--profile", "default", "--home", f.home, f.backup)
	end := time.Now()
	if r.code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	mustContain(t, "stdout", r.stdout, "knows this restore is intended", "publish")
	hermestest.Eventually(t, "the daemon to see the new generation", 20*time.Second, func() bool {
		for _, s := range lg.after("event=" + supervisor.EventRestoreEnd) {
			// Classified after the settle, just after the end: still the
			// restore's change.
			if strings.Contains(s, "event="+supervisor.EventGenerationChanged) && strings.Contains(s, "main-replaced") &&
				strings.Contains(s, "intended=true") {
				return true
			}
		}
		return false
	})
	settled(t, m, end)
	noIncidents(t, a)
	if _, msgs := storeRows(t, f.db); msgs != 4 {
		t.Fatalf("published store has %d messages", msgs)
	}
}

// A restore while the daemon still has an unfinished incident on the
// store would race its capture: agentd refuses it, exit 3, nothing
// changed, nobody frozen by the restore.
func TestRestoreDaemonRefusesDuringIncident(t *testing.T) {
	f := newRestoreFixture(t, 2)
	a, _, _ := startRestoreAgent(t, f.home, incident.PolicySet{Replaced: incident.PolicyHold})
	vars := map[string]string{socketEnv: a.SocketPath()}
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: f.db, Rate: 200})
	w.WaitAcks(t, 5)
	hermestest.Eventually(t, "agentd to see the writer", 20*time.Second, func() bool {
		p := holderOf(storeOf(t, decodeStatus(t, ctl(t, vars, "status", "--json")), f.db), w.Pid)
		return p != nil && len(heldRoles(p)) == 3
	})
	renameFreshOver(t, f.db)
	var inc journal.Incident
	hermestest.Eventually(t, "a held incident", 15*time.Second, func() bool {
		incs := incidentsJSON(t, vars)
		if len(incs) == 1 && incs[0].State == journal.StatePinned {
			inc = incs[0]
			return true
		}
		return false
	})
	before := hermestest.DirState(t, f.home, "-shm")
	r := ctl(t, vars, "restore", "--profile", "default", "--home", f.home, "--stop-writers", "--force", f.backup)
	if r.code != exitRefused {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	mustContain(t, "stderr", r.stderr, "refused by agentd", "unfinished incident", inc.ID)
	if got := hermestest.DirState(t, f.home, "-shm"); got != before {
		t.Fatalf("store changed:\n%s", got)
	}
	if r := ctl(t, vars, "release", inc.ID, "--kill"); r.code != exitOK {
		t.Fatalf("release: exit %d %s", r.code, r.stderr)
	}
}
