package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// Lines a Hermes process appends to its own sessions/<id>.jsonl while an
// incident is open are replayed from that file, once; the lines that were
// there before are old transcript and stay out of the store.
func TestHermesOwnDivertReplayedDuringIncident(t *testing.T) {
	home, db := testHome(t)
	sessions := filepath.Join(home, "sessions")
	if err := os.Mkdir(sessions, 0o700); err != nil {
		t.Fatal(err)
	}
	jsonl := filepath.Join(sessions, "hermes-sess.jsonl")
	line := func(s string, ts float64) string {
		return fmt.Sprintf(`{"role": "user", "content": %q, "timestamp": %v}`+"\n", s, ts)
	}
	if err := os.WriteFile(jsonl, []byte(line("old transcript", 1000.5)), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, home, func(o *Options) { o.Policies.Replaced = incident.PolicyObserve })
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 200})
	waitHolder(t, a, db, w.Pid)
	hermestest.RestoreOver(t, db)
	waitIncident(t, a, db, 10*time.Second, journal.StatePinned, journal.StateReleased)

	f, err := os.OpenFile(jsonl, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(line("diverted by hermes 1", 2000.5))
	f.WriteString(line("diverted by hermes 2", 2001.5))
	f.Close()

	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if inc.State != journal.StateResolved {
		t.Fatalf("incident ended %s: %s", inc.State, inc.Detail.Error)
	}
	rows := dbRows(t, db)
	if rows["diverted by hermes 1"] != 1 || rows["diverted by hermes 2"] != 1 {
		t.Fatalf("Hermes' diverted lines: %d, %d rows; want 1 each", rows["diverted by hermes 1"], rows["diverted by hermes 2"])
	}
	if rows["old transcript"] != 0 {
		t.Fatal("a line from before the incident was replayed")
	}
	b, _ := os.ReadFile(jsonl)
	if want := line("old transcript", 1000.5) + line("diverted by hermes 1", 2000.5) + line("diverted by hermes 2", 2001.5); string(b) != want {
		t.Fatal("Hermes' file was modified")
	}
}
