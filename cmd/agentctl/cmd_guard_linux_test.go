package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/internal/hermestest"
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

// guard off pauses the store's guard (status shows it with its reason and
// end), guard on re-arms it at once.
func TestGuardOffOn(t *testing.T) {
	db := hermestest.NewStore(t)
	home := filepath.Dir(db)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 3, Linger: true})
	a, _, _ := startAgent(t, home, func(o *supervisor.Options) { o.Guard = true })
	vars := map[string]string{socketEnv: a.SocketPath()}
	guardOf := func() *control.GuardStatus {
		return storeOf(t, decodeStatus(t, ctl(t, vars, "status", "--json")), db).Guard
	}
	hermestest.Eventually(t, "the guard armed", 10*time.Second, func() bool {
		g := guardOf()
		return g != nil && g.State == control.GuardArmed
	})

	r := ctl(t, vars, "guard", "off", "--profile", "default", "--home", home, "--for", "20m", "--reason", "vacuum into")
	if r.code != exitOK || !strings.Contains(r.stdout, "paused until") || !strings.Contains(r.stdout, "agentctl guard on --profile default") {
		t.Fatalf("guard off: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	g := guardOf()
	if g == nil || g.State != control.GuardPaused || g.Reason != "vacuum into" || time.Until(g.Until) < 19*time.Minute {
		t.Fatalf("status guard after off: %+v", g)
	}
	if r := ctl(t, vars, "status", "--home", home); !strings.Contains(r.stdout, "paused until") {
		t.Errorf("status table lacks the pause:\n%s", r.stdout)
	}

	r = ctl(t, vars, "guard", "on", "--db", db)
	if r.code != exitOK || !strings.Contains(r.stdout, "re-armed: armed") {
		t.Fatalf("guard on: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if g := guardOf(); g == nil || g.State != control.GuardArmed {
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
