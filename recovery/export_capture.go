//go:build unix

package recovery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stateguard/stateguard/store"
)

// ExportCapture reads a session from a capture (stateguard's or Hermes')
// through a private copy under tmpDir, so an operator can read what was
// salvaged before replaying it. The capture itself is never opened with
// SQLite and the copy is removed again.
func ExportCapture(ctx context.Context, dir, tmpDir, sessionID string) (*Export, error) {
	if tmpDir == "" {
		tmpDir = os.TempDir()
	}
	dbPath, err := PrivateCopy(ctx, dir, tmpDir)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	defer os.RemoveAll(filepath.Dir(dbPath))
	// Read-write: the copy is ours, and SQLite may have to recover its WAL.
	db, err := sql.Open("sqlite", "file:"+escapeURIPath(dbPath)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, fmt.Errorf("export: open the copy of %s: %w", dir, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	x, err := ReadExport(ctx, db, sessionID)
	if errors.Is(err, store.ErrNoSession) {
		return nil, fmt.Errorf("%w; the capture %s does not hold it", err, dir)
	}
	if err != nil {
		return nil, err
	}
	x.Source = dir
	return x, nil
}
