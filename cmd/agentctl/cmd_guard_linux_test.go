package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/supervisor"
)

func TestGuardUsage(t *testing.T) {
	vars := noDaemon(t)
	for _, args := range [][]string{
		{"guard"},
		{"guard", "sideways", "--profile", "default"},
		{"guard", "off"},
		{"guard", "off", "--profile", "default", "--db", "/x/state.db"},
		{"guard", "off", "--db", "/x/state.db", "--home", "/x"},
		{"guard", "off", "--profile", "default", "--for", "0s"},
		{"guard", "off", "--profile", "default", "--for", "48h"},
	} {
		if r := ctl(t, vars, args...); r.code != exitUsage {
			t.Errorf("%q: exit %d, want %d (stderr %q)", args, r.code, exitUsage, r.stderr)
		}
	}
	r := ctl(t, vars, "guard", "off", "--profile", "default")
	if r.code != exitError || !strings.Contains(r.stderr, "daemon not running") {
		t.Errorf("without agentd: exit %d %q", r.code, r.stderr)
	}
}

// guardAgent runs agentd in this process with the guard on.
func guardAgent(t *testing.T, home string) *supervisor.Agent {
	t.Helper()
	lw := &logTo{t: t, on: true}
	t.Cleanup(func() { lw.mu.Lock(); lw.on = false; lw.mu.Unlock() })
	sockDir, err := os.MkdirTemp("", "sg-ctl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := supervisor.Start(ctx, supervisor.Options{
		StateDir:  filepath.Join(t.TempDir(), "state"),
		Socket:    filepath.Join(sockDir, "agent.sock"),
		Reconcile: 300 * time.Millisecond,
		Guard:     true,
		Discover: store.DiscoverOptions{
			Getenv:          func(k string) string { return map[string]string{"HERMES_HOME": home}[k] },
			UserHome:        "/nonexistent",
			CurrentUserOnly: true,
		},
		Logger: slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("agent close: %v", err)
		}
	})
	return a
}

// guard off pauses the store's guard (status shows it with its reason and
// end), guard on re-arms it at once.
func TestGuardOffOn(t *testing.T) {
	home := t.TempDir()
	db := filepath.Join(home, "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 3, Linger: true})
	a := guardAgent(t, home)
	vars := map[string]string{socketEnv: a.SocketPath()}
	guardOf := func() *supervisor.GuardStatus {
		return storeOf(t, decodeStatus(t, ctl(t, vars, "status", "--json")), db).Guard
	}
	eventually(t, "the guard armed", 10*time.Second, func() bool {
		g := guardOf()
		return g != nil && g.State == supervisor.GuardArmed
	})

	r := ctl(t, vars, "guard", "off", "--profile", "default", "--home", home, "--for", "20m", "--reason", "vacuum into")
	if r.code != exitOK || !strings.Contains(r.stdout, "paused until") || !strings.Contains(r.stdout, "agentctl guard on --profile default") {
		t.Fatalf("guard off: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	g := guardOf()
	if g == nil || g.State != supervisor.GuardPaused || g.Reason != "vacuum into" || time.Until(g.Until) < 19*time.Minute {
		t.Fatalf("status guard after off: %+v", g)
	}
	if r := ctl(t, vars, "status", "--home", home); !strings.Contains(r.stdout, "paused until") {
		t.Errorf("status table lacks the pause:\n%s", r.stdout)
	}

	r = ctl(t, vars, "guard", "on", "--db", db)
	if r.code != exitOK || !strings.Contains(r.stdout, "re-armed: armed") {
		t.Fatalf("guard on: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if g := guardOf(); g == nil || g.State != supervisor.GuardArmed {
		t.Fatalf("status guard after on: %+v", g)
	}
	if r := ctl(t, vars, "guard", "on", "--profile", "default"); r.code != exitOK || !strings.Contains(r.stdout, "was not paused") {
		t.Errorf("guard on twice: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := ctl(t, vars, "guard", "off", "--profile", "nope"); r.code != exitError || !strings.Contains(r.stderr, `no profile "nope"`) {
		t.Errorf("unknown profile: exit %d %q", r.code, r.stderr)
	}
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}
