package store

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Real SQLite errors of the kinds an operator meets come out of Explain
// naming the file and saying what to do.
func TestExplainNamesFileAndNextStep(t *testing.T) {
	dir := t.TempDir()
	notDB := filepath.Join(dir, "state.db")
	if err := os.WriteFile(notDB, []byte(strings.Repeat("not sqlite ", 200)), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.db")
	missing := filepath.Join(dir, "no-such-dir", "state.db")
	cases := []struct {
		path, query, want string
	}{
		{notDB, "SELECT count(*) FROM sqlite_master", "not a SQLite database"},
		{missing, "SELECT count(*) FROM sqlite_master", "exist"},
		{empty, "SELECT count(*) FROM messages", "no Hermes schema"},
	}
	for _, c := range cases {
		db, err := sql.Open("sqlite", "file:"+c.path+"?mode=rwc")
		if c.path == missing {
			db, err = sql.Open("sqlite", "file:"+c.path+"?mode=ro")
		}
		if err != nil {
			t.Fatal(err)
		}
		var n int
		qerr := db.QueryRow(c.query).Scan(&n)
		db.Close()
		if qerr == nil {
			t.Fatalf("%s: %s succeeded", c.path, c.query)
		}
		got := Explain(c.path, qerr).Error()
		if !strings.Contains(got, c.path) || !strings.Contains(got, "hint:") || !strings.Contains(got, c.want) {
			t.Errorf("Explain(%s, %v) = %q: want the path, a hint, and %q", c.path, qerr, got, c.want)
		}
		if again := Explain(c.path, Explain(c.path, qerr)).Error(); again != got {
			t.Errorf("explained twice: %q", again)
		}
	}
	if err := Explain(notDB, os.ErrClosed); err != os.ErrClosed {
		t.Errorf("an unrelated error was rewritten: %v", err)
	}
}
