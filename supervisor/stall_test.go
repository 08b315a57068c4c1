package supervisor

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/alert"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

const testStallTimeout = 300 * time.Second

// liveStore is a real Hermes store with a writable handle for planting
// liveness rows, as a gateway would write them.
type liveStore struct {
	path string
	db   *sql.DB
}

func newLiveStore(t *testing.T) *liveStore {
	t.Helper()
	path := hermestest.NewStore(t)
	db, err := sql.Open("sqlite", hermestest.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return &liveStore{path: path, db: db}
}

func (s *liveStore) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := s.db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func unixSec(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// viaREAL is t as it reads back from a REAL column of Unix seconds.
func viaREAL(t time.Time) time.Time {
	sec, frac := math.Modf(unixSec(t))
	return time.Unix(int64(sec), int64(frac*1e9))
}

func (s *liveStore) gateway(t *testing.T, id string, pid int, host string, heartbeat time.Time) {
	t.Helper()
	s.exec(t, `INSERT OR REPLACE INTO gateway_heartbeats(backend_id, pid, started_at, last_heartbeat, profile, host)
		VALUES (?, ?, ?, ?, 'default', ?)`, id, pid, unixSec(heartbeat.Add(-time.Hour)), unixSec(heartbeat), host)
}

func (s *liveStore) session(t *testing.T, id string, lastActivity time.Time) {
	t.Helper()
	s.exec(t, `INSERT INTO sessions(id, source, started_at, last_activity_at) VALUES (?, 'cli', ?, ?)`,
		id, unixSec(lastActivity.Add(-time.Hour)), unixSec(lastActivity))
}

func (s *liveStore) message(t *testing.T, session string, at time.Time) {
	t.Helper()
	s.exec(t, `INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', 'hello', ?)`,
		session, unixSec(at))
}

func (s *liveStore) lease(t *testing.T, conv, holder string, acquired, expires time.Time) {
	t.Helper()
	s.exec(t, `INSERT OR REPLACE INTO session_turn_leases(conversation_id, holder, acquired_at, expires_at)
		VALUES (?, ?, ?, ?)`, conv, holder, unixSec(acquired), unixSec(expires))
}

// startSleeper starts a live process to stand in for a hung gateway.
func startSleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "3600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func stopSleeper(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait() // reaped: the pid is gone, not a zombie
}

func stallCheck(t *testing.T, w *StallWatch, path string, now time.Time) []StallEvent {
	t.Helper()
	ev, err := w.Check(context.Background(), store.Store{Path: path}, now)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func describeStalls(ev []StallEvent) string {
	var b strings.Builder
	for _, e := range ev {
		fmt.Fprintf(&b, "%s %s %s", e.Event, e.Kind, e.Key)
		if e.Reason != "" {
			fmt.Fprintf(&b, " %s", e.Reason)
		}
		b.WriteString("; ")
	}
	return b.String()
}

func expectStalls(t *testing.T, what string, got []StallEvent, want string) {
	t.Helper()
	if d := describeStalls(got); d != want {
		t.Errorf("%s: got %q, want %q", what, d, want)
	}
}

func TestStallHungGatewayOnceThenCleared(t *testing.T) {
	s := newLiveStore(t)
	host, _ := os.Hostname()
	now := time.Now()
	gw := startSleeper(t)
	s.gateway(t, "gw-local", gw.Process.Pid, host, now.Add(-10*time.Minute))
	s.gateway(t, "gw-nohost", gw.Process.Pid, "", now.Add(-10*time.Minute))
	s.gateway(t, "gw-fresh", gw.Process.Pid, host, now.Add(-10*time.Second))
	s.gateway(t, "gw-elsewhere", gw.Process.Pid, "some-other-host", now.Add(-10*time.Minute))

	m := NewMetrics()
	w := NewStallWatch(StallConfig{Timeout: testStallTimeout, Metrics: m})
	ev := stallCheck(t, w, s.path, now)
	expectStalls(t, "first check", ev, "stall.detected gateway gw-local; stall.detected gateway gw-nohost; ")
	if len(ev) > 0 && (ev[0].PID != gw.Process.Pid || ev[0].Store != s.path || ev[0].Age < 10*time.Minute-time.Millisecond) {
		t.Errorf("event %+v", ev[0])
	}
	for i := 1; i <= 3; i++ {
		expectStalls(t, fmt.Sprintf("check %d minutes on", i), stallCheck(t, w, s.path, now.Add(time.Duration(i)*time.Minute)), "")
	}
	if v := gatherValue(t, m, "stateguard_stalls", nil); v != 2 {
		t.Errorf("stalls gauge %v, want 2", v)
	}

	later := now.Add(4 * time.Minute)
	s.gateway(t, "gw-local", gw.Process.Pid, host, later)
	s.gateway(t, "gw-fresh", gw.Process.Pid, host, later)
	ev = stallCheck(t, w, s.path, later)
	expectStalls(t, "after a fresh heartbeat", ev, "stall.cleared gateway gw-local moved; ")
	if len(ev) == 1 && !ev[0].LastMoved.Equal(viaREAL(later)) {
		t.Errorf("cleared LastMoved %v, want the new heartbeat %v", ev[0].LastMoved, later)
	}
	expectStalls(t, "and again", stallCheck(t, w, s.path, later.Add(time.Minute)), "")

	// The hung process dies: not hung any more, and said so once.
	stopSleeper(t, gw)
	expectStalls(t, "after the pid exits", stallCheck(t, w, s.path, later.Add(2*time.Minute)), "stall.cleared gateway gw-nohost pid_exited; ")
	if v := gatherValue(t, m, "stateguard_stalls", nil); v != 0 {
		t.Errorf("stalls gauge %v, want 0", v)
	}
}

func TestStallDeadGatewayNoAlert(t *testing.T) {
	s := newLiveStore(t)
	dead := startSleeper(t)
	pid := dead.Process.Pid
	stopSleeper(t, dead)
	now := time.Now()
	s.gateway(t, "gw-dead", pid, "", now.Add(-time.Hour))
	w := NewStallWatch(StallConfig{Timeout: testStallTimeout})
	for i := range 3 {
		expectStalls(t, "dead gateway", stallCheck(t, w, s.path, now.Add(time.Duration(i)*time.Minute)), "")
	}
}

func TestStallLeasedSession(t *testing.T) {
	s := newLiveStore(t)
	now := time.Now()
	old := now.Add(-15 * time.Minute)
	// The holder's gateway runs elsewhere, so only the lease rule can fire;
	// its old heartbeat is one of the signals that did not move.
	s.gateway(t, "gw-remote", 4242, "remote-host", old)
	s.gateway(t, "gw-alive", 4343, "remote-host", now.Add(-time.Minute))
	for _, id := range []string{"s-stuck", "s-expired", "s-heartbeat", "s-recent"} {
		s.session(t, id, old)
		s.message(t, id, old)
	}
	s.lease(t, "s-stuck", "gateway host=remote-host pid=4242", old, now.Add(time.Hour))
	s.lease(t, "s-expired", "pid=4242", old, now.Add(-time.Second))
	s.lease(t, "s-heartbeat", "pid=4343", old, now.Add(time.Hour))
	s.lease(t, "s-recent", "pid=4242", now.Add(-time.Minute), now.Add(time.Hour))

	w := NewStallWatch(StallConfig{Timeout: testStallTimeout})
	ev := stallCheck(t, w, s.path, now)
	expectStalls(t, "first check", ev, "stall.detected session s-stuck; ")
	if len(ev) == 1 && (ev[0].PID != 4242 || !ev[0].LastMoved.Equal(viaREAL(old))) {
		t.Errorf("event %+v", ev[0])
	}
	expectStalls(t, "a minute on", stallCheck(t, w, s.path, now.Add(time.Minute)), "")

	// A new message is movement.
	s.message(t, "s-stuck", now.Add(90*time.Second))
	expectStalls(t, "after a message", stallCheck(t, w, s.path, now.Add(2*time.Minute)), "stall.cleared session s-stuck moved; ")

	// Nothing moves again for the timeout: a new stall, a new alert.
	s.exec(t, `DELETE FROM session_turn_leases WHERE conversation_id != 's-stuck'`)
	then := now.Add(90*time.Second + testStallTimeout + time.Second)
	expectStalls(t, "stuck again", stallCheck(t, w, s.path, then), "stall.detected session s-stuck; ")
	s.lease(t, "s-stuck", "pid=4242", old, then.Add(-time.Second))
	expectStalls(t, "lease released", stallCheck(t, w, s.path, then.Add(time.Minute)), "stall.cleared session s-stuck released; ")
}

func TestStallCheckErrorClearsNothing(t *testing.T) {
	s := newLiveStore(t)
	now := time.Now()
	s.session(t, "s1", now.Add(-time.Hour))
	s.lease(t, "s1", "pid=1", now.Add(-time.Hour), now.Add(time.Hour))
	w := NewStallWatch(StallConfig{Timeout: testStallTimeout})
	expectStalls(t, "first", stallCheck(t, w, s.path, now), "stall.detected session s1; ")

	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}
	moved := s.path + ".away"
	if err := os.Rename(s.path, moved); err != nil {
		t.Fatal(err)
	}
	if ev, err := w.Check(context.Background(), store.Store{Path: s.path}, now.Add(time.Minute)); err == nil || len(ev) != 0 {
		t.Fatalf("check of a missing store: %v, %v; want an error and no events", describeStalls(ev), err)
	} else if !strings.Contains(err.Error(), s.path) {
		t.Errorf("error %q does not name the store", err)
	}
	if err := os.Rename(moved, s.path); err != nil {
		t.Fatal(err)
	}
	expectStalls(t, "back", stallCheck(t, w, s.path, now.Add(2*time.Minute)), "")
	expectStalls(t, "forget", w.Forget(s.path, now.Add(3*time.Minute)), "stall.cleared session s1 not_watching; ")
}

func TestStallDisabledAndDue(t *testing.T) {
	var zero StallWatch
	if ev, err := zero.Check(context.Background(), store.Store{Path: "/nonexistent/state.db"}, time.Now()); ev != nil || err != nil {
		t.Errorf("zero StallWatch: %v, %v", ev, err)
	}
	off := NewStallWatch(StallConfig{})
	if ev, err := off.Check(context.Background(), store.Store{Path: "/nonexistent/state.db"}, time.Now()); ev != nil || err != nil {
		t.Errorf("timeout 0: %v, %v", ev, err)
	}
	if off.Due("/x", time.Now()) {
		t.Error("a disabled watch is due")
	}

	s := newLiveStore(t)
	w := NewStallWatch(StallConfig{Timeout: testStallTimeout})
	now := time.Now()
	if !w.Due(s.path, now) {
		t.Error("never checked, not due")
	}
	stallCheck(t, w, s.path, now)
	if w.Due(s.path, now.Add(30*time.Second)) || !w.Due(s.path, now.Add(StallCheckInterval)) {
		t.Error("Due does not follow StallCheckInterval")
	}
}

// TestStallAlertsOnce is the acceptance path: a hung gateway checked every
// minute reaches the alert command once, and its recovery once.
func TestStallAlertsOnce(t *testing.T) {
	script, out := hermestest.NewAlertRecorder(t)
	log := hermestest.TestLogger(t)
	a := alert.New(alert.Config{Exec: []string{script}, Concurrency: 1, RateLimit: -1}, log)
	s := newLiveStore(t)
	gw := startSleeper(t)
	now := time.Now()
	s.gateway(t, "gw1", gw.Process.Pid, "", now.Add(-10*time.Minute))
	w := NewStallWatch(StallConfig{Timeout: testStallTimeout})
	for i := range 5 {
		at := now.Add(time.Duration(i) * time.Minute)
		if i == 3 {
			s.gateway(t, "gw1", gw.Process.Pid, "", at)
		}
		for _, e := range stallCheck(t, w, s.path, at) {
			a.Send(e.Alert(at))
		}
	}
	if err := a.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, run := range hermestest.Runs(t, out) {
		docText, _, _ := strings.Cut(run, "env=")
		var doc struct {
			Event, Level, Store string
			Fields              map[string]any
		}
		if err := json.Unmarshal([]byte(docText), &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Store != s.path || doc.Fields["key"] != "gw1" || doc.Fields["pid"] != float64(gw.Process.Pid) {
			t.Errorf("alert %s", docText)
		}
		got = append(got, doc.Event+" "+doc.Level)
	}
	if want := []string{"stall.detected WARN", "stall.cleared INFO"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("alerts %v, want %v", got, want)
	}
}
