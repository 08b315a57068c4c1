package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// The status probes (ProbeFile, ReadLiveness) explain a SQLite error: a
// file with SQLite's header and garbage after it, and a SQLite database
// without Hermes' tables, each give an error naming the file with a hint.
func TestProbesExplainSQLiteErrors(t *testing.T) {
	dir := realTemp(t)
	damaged := filepath.Join(dir, "damaged.db")
	if err := os.WriteFile(damaged, append([]byte(MainMagic), []byte(strings.Repeat("\xff junk", 1000))...), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.db")
	hermestest.ExecSQL(t, "file:"+other+"?mode=rwc", "PRAGMA journal_mode=WAL", "CREATE TABLE unrelated(x)")
	ctx := context.Background()
	_, perr := ProbeFile(ctx, damaged)
	_, lerr := ReadLiveness(ctx, damaged)
	for _, c := range []struct {
		what string
		err  error
		path string
	}{
		{"ProbeFile of a damaged file", perr, damaged},
		{"ReadLiveness of a damaged file", lerr, damaged},
	} {
		var ex *ExplainedError
		if !errors.As(c.err, &ex) || !strings.Contains(c.err.Error(), c.path) || !strings.Contains(c.err.Error(), "hint:") {
			t.Errorf("%s: %v: want an error naming %s with a hint", c.what, c.err, c.path)
		}
	}
	if _, err := ProbeFile(ctx, other); err == nil || !strings.Contains(err.Error(), other) {
		t.Errorf("ProbeFile of a non-Hermes database: %v: want an error naming it", err)
	}
}
