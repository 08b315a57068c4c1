package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/stateguard/stateguard/fileid"
)

// Why the agent checkpoints at all: its guard holds a read lock on every
// live generation's SHARED range, so no connection can become the "last
// connection" that checkpoints and removes the WAL when it closes. Without
// a checkpoint of its own, committed rows of a store nobody has open would
// live only in its -wal, and deleting a leftover -wal (harmless without
// the guard) would lose them.

// Checkpoint is what one TRUNCATE checkpoint did.
type Checkpoint struct {
	// Done: every frame was copied into the main file and the WAL was
	// truncated to zero bytes. False when another connection was in the
	// way (a reader on an old snapshot, a writer); SQLite then copied
	// what it could, as a PASSIVE checkpoint does.
	Done bool
	// Frames and Backfilled are SQLite's counts after the checkpoint
	// (both 0 once the WAL is truncated, both -1 when it could not start:
	// another connection was checkpointing).
	Frames, Backfilled int
}

// TruncateCheckpoint runs PRAGMA wal_checkpoint(TRUNCATE) on c without
// waiting for any lock: busy_timeout is 0 for its length, so a live
// writer or reader is never held up (the checkpoint then does what a
// PASSIVE one would) and a frozen process cannot hang it. c must have
// PERSIST_WAL set. The connection's busy timeout is set back to
// restoreMS afterwards.
func TruncateCheckpoint(ctx context.Context, c *sql.Conn, restoreMS int) (Checkpoint, error) {
	if _, err := c.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint: %w", err)
	}
	defer func() {
		// A failure leaves the connection never waiting on a lock, which
		// its callers' own retries (Writable.begin) already cover.
		_, _ = c.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", restoreMS))
	}()
	var busy int
	var cp Checkpoint
	err := c.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &cp.Frames, &cp.Backfilled)
	if err != nil {
		if IsBusy(err) {
			return Checkpoint{Frames: -1, Backfilled: -1}, nil
		}
		return cp, fmt.Errorf("wal_checkpoint(TRUNCATE): %w", err)
	}
	cp.Done = busy == 0
	return cp, nil
}

// ErrGenerationMoved means the files at a store's paths are no longer the
// ones the caller expected: a checkpoint through the path could reach a
// -wal that does not belong with the -shm it also opened.
var ErrGenerationMoved = errors.New("store files changed")

// IDs returns g's file identities.
func (g Generation) IDs() fileid.Family {
	id := func(f fileid.State) fileid.ID {
		if !f.Exists {
			return fileid.ID{}
		}
		return f.ID
	}
	return fileid.Family{Main: id(g.Main), WAL: id(g.WAL), SHM: id(g.SHM)}
}

// checkpointIdle checkpoints the WAL of the store at path into its main
// file through a connection of its own (PERSIST_WAL, so closing it never
// removes -wal/-shm), when same says the files are still the caller's
// both before the connection opens its -wal and -shm and after: SQLite
// opens them by name, and a -wal unlinked between the two opens would
// leave it with another generation's -shm, whose frames it would then
// copy into the main. hold keeps new connections out of the store while
// the WAL is copied (see holdNewConnections); it returns a nil release
// and no error when that cannot be had now, and the checkpoint is
// skipped as for a busy store.
func checkpointIdle(ctx context.Context, path string, same func() error, hold func() (release func(), err error)) (Checkpoint, error) {
	if err := same(); err != nil {
		return Checkpoint{}, err
	}
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(filepath.Clean(path))
	db, err := OpenLive(path, "file:"+esc+"?mode=rw&_pragma=busy_timeout(0)")
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	c, err := db.Conn(ctx)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	defer c.Close()
	if err := c.Raw(SetPersistWAL); err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: set PERSIST_WAL: %w (refusing to open the store without it)", path, err)
	}
	// A read opens the -wal and maps the -shm; only then is the pair
	// this connection uses fixed (and journal_mode reports the file's).
	var n int
	if err := c.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master").Scan(&n); err != nil {
		if IsBusy(err) {
			return Checkpoint{}, nil
		}
		return Checkpoint{}, fmt.Errorf("checkpoint %s: read schema: %w", path, err)
	}
	var mode string
	if err := c.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: journal mode %s: %w", path, mode, ErrNotWALStore)
	}
	if err := same(); err != nil {
		return Checkpoint{}, err
	}
	release, err := hold()
	if err != nil || release == nil {
		return Checkpoint{}, err
	}
	defer release()
	// A connection that started before the hold may have opened a fresh
	// -wal/-shm pair at the names: then the WAL this one holds is no
	// longer the store's to copy.
	if err := same(); err != nil {
		return Checkpoint{}, err
	}
	cp, err := TruncateCheckpoint(ctx, c, 0)
	if err != nil {
		return cp, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return cp, nil
}

// sameFiles checks that the store's main, -wal and -shm, as lstat (by
// name or through a directory handle) sees them, are want's inodes and
// regular files.
func sameFiles(path string, lstat func(sfx string) (fileid.State, error), want fileid.Family) error {
	for _, f := range []struct {
		suffix string
		id     fileid.ID
	}{{"", want.Main}, {"-wal", want.WAL}, {"-shm", want.SHM}} {
		st, err := lstat(f.suffix)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		}
		if !st.Exists || !st.Mode.IsRegular() || st.ID != f.id {
			return fmt.Errorf("checkpoint %s%s: %w (now %v, want %v)", path, f.suffix, ErrGenerationMoved, st.ID, f.id)
		}
	}
	return nil
}
