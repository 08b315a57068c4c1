package alert

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// Error-level alerts are never dropped: with the command stuck and the
// queue full of one owner's warnings, one owner's flood of errors is kept
// (the ones past urgentPerKey coalesced into the last) and another
// owner's error is delivered, before the queue's warnings.
func TestAlertErrorsNeverDropped(t *testing.T) {
	dir := t.TempDir()
	out, release := filepath.Join(dir, "out"), filepath.Join(dir, "release")
	script := hermestest.WriteScript(t, dir, "gate.sh", fmt.Sprintf(`until [ -e %q ]; do sleep 0.01; done
cat >> %q; echo >> %[2]q; echo "--end--" >> %[2]q
`, release, out))
	log, _ := newTestLogger()
	a := New(Config{Exec: []string{script}, Concurrency: 1, Queue: 2, RateLimit: -1}, log)
	carol, dave := filepath.Join(dir, "carol"), "/gone/dave/state.db" // two owners
	if err := os.MkdirAll(carol+"/p0", 0o700); err != nil {
		t.Fatal(err)
	}
	a.Send(Alert{Event: evOpened, Store: carol + "/p0/state.db", Level: slog.LevelError})
	hermestest.Eventually(t, "the alert command to start", 10*time.Second, func() bool { return a.running.Load() == 1 })
	const flood = 40
	for i := 0; i <= flood; i++ {
		if err := os.MkdirAll(fmt.Sprintf("%s/p%d", carol, i), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= flood; i++ {
		a.Send(Alert{Event: evCaptured, Store: fmt.Sprintf("%s/p%d/state.db", carol, i), Level: slog.LevelInfo})
		a.Send(Alert{Event: evOpened, Store: fmt.Sprintf("%s/p%d/state.db", carol, i), Level: slog.LevelError})
	}
	a.Send(Alert{Event: evOpened, Store: dave, Level: slog.LevelError})
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	closeAlerter(t, a)

	var opened, carolOpened, coalesced, daveAt, firstWarn int
	for i, run := range hermestest.Runs(t, out) {
		var doc struct {
			Event, Store string
			Fields       map[string]any
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(run)), &doc); err != nil {
			t.Fatalf("run %d: %v: %q", i, err, run)
		}
		switch {
		case doc.Event == evOpened && doc.Store == dave:
			daveAt = i
		case doc.Event == evOpened:
			carolOpened++
			if n, ok := doc.Fields["coalesced"].(float64); ok {
				coalesced += int(n)
			}
		case firstWarn == 0:
			firstWarn = i
		}
		if doc.Event == evOpened {
			opened++
		}
	}
	if carolOpened+coalesced != flood+1 || daveAt == 0 {
		t.Errorf("carol's incident.opened: %d delivered + %d coalesced, want %d; dave's delivered at run %d",
			carolOpened, coalesced, flood+1, daveAt)
	}
	if carolOpened > urgentPerKey+1 {
		t.Errorf("%d runs for carol's flood of errors, want at most %d", carolOpened, urgentPerKey+1)
	}
	if firstWarn < daveAt {
		t.Errorf("a queued warning (run %d) ran before dave's error (run %d)", firstWarn, daveAt)
	}
	if s := a.Stats(); s.Coalesced != uint64(coalesced) || s.Dropped != flood-2 {
		t.Errorf("stats %+v: want %d coalesced and only the %d warnings past the queue dropped", s, coalesced, flood-2)
	}
}
