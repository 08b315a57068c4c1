package main

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// A replay into a file that is not a database, or a database without
// Hermes' schema, fails naming the file and what to do, and writes
// nothing into it.
func TestReplayIntoBadStoreNamesFile(t *testing.T) {
	dir := t.TempDir()
	jsonl := filepath.Join(dir, "s1.jsonl")
	writeFile(t, jsonl, `{"role": "user", "content": "A", "timestamp": 1}`+"\n")
	notDB := filepath.Join(dir, "state.db")
	junk := strings.Repeat("definitely not sqlite ", 300)
	writeFile(t, notDB, junk)
	noSchema := filepath.Join(dir, "other", "state.db")
	if err := os.Mkdir(filepath.Dir(noSchema), 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+noSchema+"?mode=rwc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA journal_mode=WAL; CREATE TABLE unrelated(x)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, c := range []struct{ db, want string }{
		{notDB, "not a SQLite database"},
		{noSchema, "no Hermes schema"},
	} {
		r := ctl(t, nil, "replay", jsonl, "--db", c.db, "--now")
		if r.code == exitOK || !strings.Contains(r.stderr, c.db) || !strings.Contains(r.stderr, "hint:") || !strings.Contains(r.stderr, c.want) {
			t.Errorf("replay into %s: exit %d, stderr %q: want an error naming the file with a hint (%q)", c.db, r.code, r.stderr, c.want)
		}
	}
	if b, _ := os.ReadFile(notDB); string(b) != junk {
		t.Error("the non-database file was changed")
	}
}

// `status --profile nosuch` fails saying so; it never prints an empty
// table with exit 0.
func TestStatusUnknownProfileFails(t *testing.T) {
	home := t.TempDir()
	if err := hermestest.CreateStore(filepath.Join(home, "state.db")); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HERMES_HOME": home, "HOME": "/nonexistent", "STATEGUARD_SOCKET": filepath.Join(t.TempDir(), "none.sock")}
	r := ctl(t, env, "status", "--profile", "nosuch")
	if r.code == exitOK || !strings.Contains(r.stderr, "no store of profile nosuch") || !strings.Contains(r.stderr, "hint:") {
		t.Fatalf("exit %d, stderr %q: want a failure naming the profile, with a hint", r.code, r.stderr)
	}
	if r := ctl(t, env, "status", "--profile", "default"); r.code != exitOK {
		t.Fatalf("status --profile default: exit %d, %s", r.code, r.stderr)
	}
}

// An agent named by --socket that does not answer is an error: the
// default state directory's journal (perhaps another agent's) is not read
// in its place.
func TestSocketFlagNeverFallsBackToDefaultJournal(t *testing.T) {
	stateHome := t.TempDir()
	env := map[string]string{"XDG_STATE_HOME": stateHome, "XDG_RUNTIME_DIR": t.TempDir(), "HOME": "/nonexistent"}
	for _, verb := range []string{"incidents", "queue"} {
		r := ctl(t, env, verb, "--socket", "/nonexistent")
		if r.code == exitOK || !strings.Contains(r.stderr, "/nonexistent") || !strings.Contains(r.stderr, "--state-dir") {
			t.Errorf("%s --socket /nonexistent: exit %d, stderr %q: want an error naming the socket", verb, r.code, r.stderr)
		}
	}
}
