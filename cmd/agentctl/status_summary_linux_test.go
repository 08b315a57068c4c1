package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/supervisor"
)

// With many stores, status leads with a summary and lists only the stores
// that need attention; --all lists every store; --profile and --home
// filter as before; --json keeps every store.
func TestStatusSummaryManyStores(t *testing.T) {
	home := t.TempDir()
	if err := hermestest.CreateStore(filepath.Join(home, "state.db")); err != nil {
		t.Fatal(err)
	}
	const n = summaryAbove + 10
	for i := range n {
		if err := os.MkdirAll(filepath.Join(home, "profiles", fmt.Sprintf("p%03d", i)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	a, _, _ := startAgent(t, home, func(o *supervisor.Options) { o.Guard = true })
	vars := map[string]string{socketEnv: a.SocketPath()}
	db := filepath.Join(home, "state.db")
	hermestest.Eventually(t, "every store listed, the default one checked", 20*time.Second, func() bool {
		st := decodeStatus(t, ctl(t, vars, "status", "--json"))
		return len(st.Stores) == n+1 && storeOf(t, st, db).Guard != nil
	})
	if r := ctl(t, vars, "guard", "off", "--profile", "default", "--home", home, "--for", "20m", "--reason", "maintenance"); r.code != exitOK {
		t.Fatalf("guard off: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	r := ctl(t, vars, "status")
	mustContain(t, "summary", r.stdout, fmt.Sprintf("%d stores (hermes %d) in 1 home(s)", n+1, n+1),
		"verdict", "guard", "paused 1", "incidents  0 open on 0 store(s)", "replays    0 queued",
		"Stores needing attention (1; --all lists every store)", "default  "+db, "why listed: guard paused", "daemon running")
	if strings.Contains(r.stdout, "p008") {
		t.Errorf("summary lists a store that needs no attention:\n%s", r.stdout)
	}
	if lines := strings.Count(r.stdout, "\n"); lines > 25 {
		t.Errorf("summary of %d stores is %d lines:\n%s", n+1, lines, r.stdout)
	}
	if code := decodeStatus(t, ctl(t, vars, "status", "--json")); r.code != statusExit(code) {
		t.Errorf("summary exit %d, the full status's %d", r.code, statusExit(code))
	}

	all := ctl(t, vars, "status", "--all")
	for _, p := range []string{"p000", "p008", fmt.Sprintf("p%03d", n-1)} {
		mustContain(t, "--all", all.stdout, p+"  "+filepath.Join(home, "profiles", p))
	}
	if strings.Contains(all.stdout, "needing attention") {
		t.Errorf("--all prints the summary:\n%s", all.stdout)
	}

	one := ctl(t, vars, "status", "--profile", "p008")
	mustContain(t, "--profile p008", one.stdout, "p008  ")
	if strings.Contains(one.stdout, "needing attention") {
		t.Errorf("a filtered status of one store prints the summary:\n%s", one.stdout)
	}

	st := decodeStatus(t, ctl(t, vars, "status", "--json", "--home", home))
	if len(st.Stores) != n+1 || st.Version != control.StatusVersion {
		t.Errorf("--json: %d stores version %d, want %d and %d", len(st.Stores), st.Version, n+1, control.StatusVersion)
	}
}
