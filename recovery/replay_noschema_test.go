package recovery

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// A store whose schema lived only in a lost -wal has no tables until
// Hermes creates them again: a replay into it says so with
// store.ErrNoTable (the replay queue waits for the schema instead of
// spending its attempts) and writes nothing.
func TestReplayIntoStoreWithoutSchema(t *testing.T) {
	e := newReplayEnv(t)
	p := e.writeJSONL("s1.jsonl", msg("user", "A", 1))
	db := filepath.Join(t.TempDir(), "state.db")
	c, err := sql.Open("sqlite", hermestest.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec("PRAGMA journal_mode=WAL"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	_, err = ReplayFile(context.Background(), db, p, ReplayOptions{})
	if !errors.Is(err, store.ErrNoTable) {
		t.Fatalf("replay into a store with no schema: %v; want store.ErrNoTable", err)
	}
}
