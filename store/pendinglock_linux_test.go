package store

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// While the idle checkpoint holds new connections out of a store, a
// process that opens it then cannot start a read (with no busy timeout it
// is told the store is locked; Hermes' busy handler would wait), a writer
// that had it open goes on committing, and once released the newcomer
// reads.
func TestHoldNewConnectionsKeepsOnlyNewcomersOut(t *testing.T) {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Skip("sqlite3 (the CLI) is not installed")
	}
	db := filepath.Join(mkdir(t, realTemp(t), "alice"), "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 200, CheckpointEvery: -1})
	w.WaitAcks(t, 5)
	newcomer := func() (string, error) {
		out, err := exec.Command("sqlite3", "-cmd", ".timeout 0", db, "SELECT count(*) FROM messages").CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := newcomer(); err != nil {
		t.Fatalf("a new connection before the hold: %v: %s", err, out)
	}

	f, err := os.OpenFile(db, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	release, err := holdNewConnections(f)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := newcomer(); err == nil || !strings.Contains(out, "locked") {
		release()
		t.Fatalf("a new connection during the hold read the store: %v: %q", err, out)
	}
	w.AcksGrow(t, 10) // the writer that was there goes on
	release()
	if out, err := newcomer(); err != nil {
		t.Fatalf("a new connection after the release: %v: %s", err, out)
	}
}
