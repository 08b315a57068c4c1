//go:build unix

package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// ErrNoSpaceToCheckpoint: the store's filesystem has less free space than
// its WAL's size (plus checkpointSpareBytes); CheckpointIdle did not start.
var ErrNoSpaceToCheckpoint = errors.New("not enough free space to checkpoint")

const checkpointSpareBytes = 1 << 20

// CheckpointIdle checkpoints the store's WAL into its main file (see
// checkpointIdle) when its files are want's, checked through the store
// directory's handle before SQLite opens them by name and again once it
// has: the directory must be the one discovery recorded, reached without
// a symlink; the three files must be want's inodes, regular, and owned by
// the directory's owner or root. A directory swapped or renamed away in
// between fails the second check and the checkpoint never runs.
//
// The caller holds want's inodes open (the guard does), so their numbers
// cannot be reused by other files in between; it runs this as the
// directory's owner (AsOwner), so what SQLite's by-name open could reach
// in a race is only what the owner may write anyway. Run it only where no
// POSIX-locking connection of this process is open on the store (the
// agent's use OFD locks).
func (s Store) CheckpointIdle(ctx context.Context, want fileid.Family) (Checkpoint, error) {
	h, err := s.OpenDir()
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w", s.Path, err)
	}
	defer h.Close()
	name := filepath.Base(s.Path)
	d := inDir{h}
	owner := h.ID().UID
	lstat := func(sfx string) (fileid.State, error) {
		st, err := d.lstat(name + sfx)
		if err == nil && st.Exists && st.UID != owner && st.UID != 0 {
			err = fmt.Errorf("%s: %w: uid %d, the directory's owner is uid %d; not checkpointed", h.Join(name+sfx), ErrForeignOwner, st.UID, owner)
		}
		return st, err
	}
	// A checkpoint copies the WAL's pages into the main in page order;
	// one that runs out of space half way leaves the main with some pages
	// new and some old. That is harmless while the WAL is there, but a
	// -wal unlinked afterwards (the full-disk chaos fault did it next)
	// leaves a malformed main that nothing can mend until space returns.
	// So the agent's own checkpoint waits until the main could take every
	// page the WAL holds.
	if wal, err := lstat("-wal"); err == nil && wal.Exists {
		if free := FreeBytes(h.Fd()); free >= 0 && free < wal.Size+checkpointSpareBytes {
			return Checkpoint{}, fmt.Errorf("checkpoint %s: %d bytes free on its filesystem, the WAL holds %d: %w",
				h.Join(name), free, wal.Size, ErrNoSpaceToCheckpoint)
		}
	}
	return checkpointIdle(ctx, h.Join(name), func() error {
		if err := sameFiles(h.Join(name), lstat, want); err != nil {
			return err
		}
		return h.Verify()
	}, func() (func(), error) { return holdMain(h, name, want.Main) })
}

// holdMain opens the main (want) through h for writing and holds new
// connections out of it (holdNewConnections); the release also closes
// the fd. A nil release with no error: another process holds or wants
// the PENDING lock now.
func holdMain(h *DirHandle, name string, want fileid.ID) (func(), error) {
	f, err := h.OpenFileForWrite(name)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", h.Join(name), err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || fileid.FromStat(&st) != want {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s is inode %v, not %v: %w", h.Join(name), fileid.FromStat(&st), want, ErrGenerationMoved)
		}
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	release, err := holdNewConnections(f)
	if err != nil {
		f.Close()
		if errors.Is(err, errNewConnectionsWaiting) {
			return nil, nil
		}
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return func() { release(); f.Close() }, nil
}
