package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // the only SQLite in the binary
)

// readBusyTimeoutMS is how long a read-only connection waits for a lock
// (a writer's checkpoint, WAL recovery) before SQLITE_BUSY.
const readBusyTimeoutMS = 5000

// OpenReadOnly opens the SQLite database at path read-only
// (file:<abs>?mode=ro), with one connection and a busy timeout. It refuses
// a symlink and anything that is not a regular file, and a missing file:
// a read-only open must never create a database.
//
// A read-only connection never checkpoints on close, so it never deletes
// -wal/-shm. But on a WAL store with no -wal/-shm (cleanly closed), SQLite
// creates both, empty, owned like the main file when running as root, and
// leaves them: the store's Generation shows WALCreated/SHMCreated after.
//
// The symlink check is an lstat before SQLite opens the path; SQLite itself
// cannot be told not to follow, so a link swapped in between is followed.
// That race needs write access to the profile directory, whose owner could
// write the store anyway.
func OpenReadOnly(path string) (*sql.DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open read-only %s: %w", path, err)
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("open read-only %s: %w", abs, err)
		}
		return nil, fmt.Errorf("open read-only: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("open read-only %s: it is a %s, not followed or opened: %w",
			abs, fileType(fi.Mode()), ErrNotRegular)
	}
	if err := SidecarsRegular(abs); err != nil {
		return nil, fmt.Errorf("open read-only %s: %w", abs, err)
	}
	db, err := OpenLive(abs, readOnlyDSN(abs))
	if err != nil {
		return nil, fmt.Errorf("open read-only %s: %w", abs, err)
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// SidecarsRegular refuses a store whose -wal or -shm is there but is not
// a regular file: SQLite opens them without O_NONBLOCK and reads a FIFO
// until someone writes to it, which could be forever.
func SidecarsRegular(abs string) error {
	for _, sfx := range []string{"-wal", "-shm"} {
		fi, err := os.Lstat(abs + sfx)
		if err == nil && !fi.Mode().IsRegular() {
			return fmt.Errorf("%s%s is a %s, not a regular file: SQLite would block on it (hint: remove it; it is no SQLite sidecar): %w",
				abs, sfx, fileType(fi.Mode()), ErrNotRegular)
		}
	}
	return nil
}

// readOnlyDSN builds a SQLite URI for abs. '%', '?' and '#' are
// percent-escaped so a path containing them still names the file.
// query_only guards against a write slipping through even if SQLite ever
// ignored mode=ro.
func readOnlyDSN(abs string) string {
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(abs)
	return fmt.Sprintf("file:%s?mode=ro&_pragma=busy_timeout(%d)&_query_only=1", esc, readBusyTimeoutMS)
}

// BeginRead opens the store at path read-only and begins a read
// transaction on its current generation, held until end is called. While
// it is held no checkpoint can move the main file past the snapshot the
// transaction reads: the agent snapshots a main file a sidecar_lost
// orphan shares with the new generation under it.
func BeginRead(ctx context.Context, path string) (end func(), err error) {
	db, err := OpenReadOnly(path)
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("begin read on %s: %w", path, err)
	}
	end = func() {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		conn.Close()
		db.Close()
	}
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		end()
		return nil, fmt.Errorf("begin read on %s: %w", path, err)
	}
	// BEGIN is deferred: the first read takes the snapshot.
	var n int
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master").Scan(&n); err != nil {
		end()
		return nil, fmt.Errorf("begin read on %s: %w", path, err)
	}
	return end, nil
}
