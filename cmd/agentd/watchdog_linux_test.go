package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/internal/sdnotify"
	"github.com/stateguard/stateguard/internal/sdnotify/sdnotifytest"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/supervisor"
)

// TestWatchdogStopsWhenTheIncidentLoopHangs: agentd's keepalive loop, as
// `agentd run` starts it under WatchdogSec=, against a real agent whose
// incident hangs in a step (injected through the engine's hook). Keepalives
// go out while the worker turns, stop once the hung step outlives its
// budget (STATUS= says which store), and come back when the step goes on.
func TestWatchdogStopsWhenTheIncidentLoopHangs(t *testing.T) {
	home := t.TempDir()
	db := filepath.Join(home, "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	reached, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := sync.OnceFunc(func() { close(proceed) })
	defer release()
	env := hermestest.NewAgentEnv(t, home)
	metrics := supervisor.NewMetrics()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := supervisor.Start(ctx, supervisor.Options{
		StateDir: env.StateDir, Socket: env.Socket, Reconcile: 200 * time.Millisecond, Logger: env.Logger, Metrics: metrics,
		Discover: store.DiscoverOptions{Getenv: env.Getenv, UserHome: "/nonexistent", CurrentUserOnly: true},
		Policies: incident.PolicySet{Grace: 5 * time.Second, Replaced: incident.PolicyKill},
		Hooks: incident.Hooks{BeforeStep: func(_ string, s journal.State) {
			if s == journal.StatePinned {
				once.Do(func() { close(reached); <-proceed })
			}
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		release()
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		if err := a.Close(cctx); err != nil {
			t.Errorf("agent close: %v", err)
		}
	})
	sock := sdnotifytest.Listen(t, false)
	n, err := sdnotify.New(sock.Addr)
	if err != nil {
		t.Fatal(err)
	}
	notify := &serviceNotify{n: n, watchdog: 600 * time.Millisecond, log: env.Logger}
	stop := startKeepalive(ctx, a, notify, env.Logger, 0)
	defer stop()
	waitMsg(t, sock, func(m sdnotifytest.Message) bool { return has(m, "WATCHDOG", "1") })

	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300})
	hermestest.Eventually(t, "the agent to see the writer hold the -wal", 20*time.Second, func() bool { return writersSeen(t, metrics) > 0 })
	w.AcksGrow(t, 10)
	hermestest.RenameFreshOver(t, db)
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the incident never reached its pin step")
	}
	unhealthy := waitMsg(t, sock, func(m sdnotifytest.Message) bool {
		s, _ := m.Get("STATUS")
		return strings.HasPrefix(s, "unhealthy: store "+db)
	})
	if has(unhealthy, "WATCHDOG", "1") {
		t.Fatalf("a keepalive with the unhealthy status: %q", unhealthy.Lines)
	}
	// Two more failed probes, and not one keepalive among them.
	from := len(sock.All())
	hermestest.Eventually(t, "two more probes of the hung worker", 20*time.Second, func() bool { return len(sock.All()) >= from+2 })
	for _, m := range sock.All()[from:] {
		if has(m, "WATCHDOG", "1") {
			t.Fatalf("a keepalive went out while the incident's step hung: %q", m.Lines)
		}
	}
	release()
	back := waitMsg(t, sock, func(m sdnotifytest.Message) bool { return has(m, "WATCHDOG", "1") })
	if s, _ := back.Get("STATUS"); !strings.HasPrefix(s, "1 stores watched") {
		t.Errorf("keepalive after the hang with STATUS=%q", s)
	}
}

// writersSeen is the agent's stateguard_holders{role="wal"} summed: processes holding the -wal.
func writersSeen(t *testing.T, m *supervisor.Metrics) float64 {
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "stateguard_holders" {
			continue
		}
		for _, s := range mf.GetMetric() {
			if labelIs(s, "role", "wal") {
				n += s.GetGauge().GetValue()
			}
		}
	}
	return n
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}
