package supervisor

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// With an open-file limit that leaves room for one guard, three live
// stores get one guard; the other two are unavailable, saying why, and the
// limit is reported once. The budget's arithmetic: 259 fds less a reserve
// of 256 is one guard of 3.
func TestGuardsStayWithinTheOpenFileLimit(t *testing.T) {
	if got := guardBudget(259); got != 1 {
		t.Fatalf("guardBudget(259) = %d, want 1", got)
	}
	home, db := testHome(t)
	dbs := []string{db}
	for i := range 2 {
		p := filepath.Join(home, "profiles", fmt.Sprintf("p%d", i), "state.db")
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := hermestest.CreateStore(p); err != nil {
			t.Fatal(err)
		}
		dbs = append(dbs, p)
	}
	var logs hermestest.LogBuffer
	a := startAgent(t, home, func(o *Options) {
		o.Guard, o.OpenFileLimit = true, 259
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	for _, p := range dbs {
		hermestest.StartWriter(t, hermestest.WriterOptions{DB: p, Rate: 50})
	}
	states := func() (armed, limited int) {
		for _, p := range dbs {
			w := a.worker(p)
			if w == nil {
				continue
			}
			switch g := w.guardState(); {
			case g == nil:
			case g.State == control.GuardArmed:
				armed++
			case g.State == control.GuardUnavailable && g.Reason == reasonFDLimit:
				limited++
			}
		}
		return armed, limited
	}
	var seen []string
	defer func() {
		if t.Failed() {
			t.Logf("guards last seen: %v", seen)
		}
	}()
	hermestest.Eventually(t, "one guard armed, two past the limit", 30*time.Second, func() bool {
		seen = seen[:0]
		for _, p := range dbs {
			if w := a.worker(p); w != nil {
				seen = append(seen, fmt.Sprintf("%s: %+v", p, w.guardState()))
			}
		}
		armed, limited := states()
		return armed == 1 && limited == 2
	})
	a.reconcile()
	if armed, limited := states(); armed != 1 || limited != 2 || a.Armed() != 1 {
		t.Errorf("after a reconcile: %d armed (agent says %d), %d past the limit; want 1, 2", armed, a.Armed(), limited)
	}
	if n := len(logs.Records(t, EventGuardFDLimit)); n != 1 {
		t.Errorf("%d %s lines, want 1:\n%s", n, EventGuardFDLimit, logs.String())
	}
}
