package recovery

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// A capture of an empty database (a stray sqlite3 opened state.db while
// a restore had it missing, so SQLite created it, and the restore's rename
// then orphaned it) holds no rows: the divert finds nothing to replay
// instead of failing on "no such table: messages" five times (the 1000-
// cycle chaos run's failed replaced incident). A capture with tables but
// no messages is still refused.
func TestDiffCaptureSchemaless(t *testing.T) {
	dir := t.TempDir()
	healthyPath := filepath.Join(dir, "state.db")
	if err := hermestest.CreateStore(healthyPath); err != nil {
		t.Fatal(err)
	}
	healthy, err := sql.Open("sqlite", "file:"+healthyPath+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer healthy.Close()
	capPath := filepath.Join(dir, "capture.db")
	capDB, err := sql.Open("sqlite", "file:"+capPath)
	if err != nil {
		t.Fatal(err)
	}
	defer capDB.Close()
	ctx := context.Background()
	diffs, err := diffCapture(ctx, capDB, healthy, time.Now())
	if err != nil || len(diffs) != 0 {
		t.Fatalf("diff of an empty capture: %v, %v; want nothing and no error", diffs, err)
	}
	if _, err := capDB.Exec("CREATE TABLE other (x)"); err != nil {
		t.Fatal(err)
	}
	if _, err := diffCapture(ctx, capDB, healthy, time.Now()); err == nil {
		t.Fatal("a capture with tables but no messages diffed without an error")
	}
}
