//go:build unix

package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// OpenFile opens name in the directory without following a symlink and
// without blocking (a FIFO put at the name would make a plain open wait
// forever), and keeps it only if fstat says it is a regular file. The
// file is returned in blocking mode.
func (h *DirHandle) OpenFile(name string) (*os.File, error) {
	path := h.Join(name)
	fd, err := unix.Openat(h.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("open %s: not a regular file (mode %#o), not read: %w", path, st.Mode, ErrNotRegular)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// lstatAt stats name in the directory without following a symlink.
func (h *DirHandle) lstatAt(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(h.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// OpenSQLiteIn opens the store file name in the directory at dir with
// open (OpenWritable, OpenReadOnly), which SQLite can only do by name, and
// makes that name safe to use: the directory is reached without a symlink
// and is the one want records (OpenDir); the file is a regular file owned
// by the directory's owner or root; and once SQLite has opened it the
// directory still verifies and the name still leads to the same inode.
// Anything else closes what was opened and returns an error naming the
// file; nothing is written.
//
// Residual race: SQLite opens by name, and modernc's driver offers neither
// SQLITE_OPEN_NOFOLLOW nor the fd it opened, so the directory's owner
// could swap the file for a symlink and back between the two checks. Run
// as the owner (AsOwner), that swap reaches only files the owner may open
// anyway.
func OpenSQLiteIn[T interface{ Close() error }](dir string, want DirID, name string, open func(path string) (T, error)) (T, error) {
	var zero T
	dir, err := filepath.Abs(dir)
	if err != nil {
		return zero, fmt.Errorf("open %s: %w", name, err)
	}
	h, err := OpenDir(dir, want)
	if err != nil {
		return zero, err
	}
	defer h.Close()
	path := h.Join(name)
	before, err := h.lstatAt(name)
	if err != nil {
		return zero, fmt.Errorf("stat %s: %w", path, err)
	}
	if before.Mode&unix.S_IFMT != unix.S_IFREG {
		return zero, fmt.Errorf("open %s: it is not a regular file, not followed or opened: %w", path, ErrNotRegular)
	}
	if owner := h.ID().UID; int(before.Uid) != owner && before.Uid != 0 {
		return zero, fmt.Errorf("open %s: %w: the file belongs to uid %d, its directory to uid %d; not opened (hint: give the file back to the directory's owner)",
			path, ErrForeignOwner, before.Uid, owner)
	}
	v, err := open(path)
	if err != nil {
		return zero, err
	}
	after, err := h.lstatAt(name)
	if err == nil {
		err = h.Verify()
	}
	if err == nil && fileid.FromStat(&after) != fileid.FromStat(&before) {
		err = fmt.Errorf("%w: %s was replaced while it was opened", fileid.ErrIdentityChanged, path)
	}
	if err != nil {
		v.Close()
		return zero, fmt.Errorf("open %s: %w; nothing was written", path, err)
	}
	return v, nil
}

// OpenWritable opens the store writable through its directory's handle
// (OpenSQLiteIn with OpenWritable).
func (s Store) OpenWritable(ctx context.Context) (*Writable, error) {
	return OpenSQLiteIn(s.Dir(), s.DirID, filepath.Base(s.Path), func(p string) (*Writable, error) {
		return OpenWritable(ctx, p)
	})
}

// OpenReadOnly opens the store read-only through its directory's handle
// (OpenSQLiteIn with OpenReadOnly).
func (s Store) OpenReadOnly() (*sql.DB, error) {
	return OpenSQLiteIn(s.Dir(), s.DirID, filepath.Base(s.Path), OpenReadOnly)
}

// ResolveStore is a store named by an operator's path (agentctl --db):
// the directory's symlinks are resolved once, here, and the directory is
// recorded as it is now, so every later open of the store goes through a
// handle on that directory (OpenWritable, OpenReadOnly) and refuses one
// swapped in since. The file itself is never a symlink (the opens refuse
// one).
func ResolveStore(path string) (Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Store{}, fmt.Errorf("store %s: %w", path, err)
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return Store{}, fmt.Errorf("store %s: its directory: %w (hint: check the path)", abs, err)
	}
	h, err := OpenDir(dir, DirID{})
	if err != nil {
		return Store{}, fmt.Errorf("store %s: %w", abs, err)
	}
	defer h.Close()
	return Store{Home: dir, Path: filepath.Join(dir, filepath.Base(abs)), Kind: Hermes, DirID: h.ID()}, nil
}

// SameFiles checks that name and its -wal and -shm in the directory are
// the inodes of f (a zero ID: no file expected to be compared), reached
// through the handle: a caller that had to open them by name (the guard)
// proves with it that what it opened is this directory's.
func (h *DirHandle) SameFiles(name string, f fileid.Family) error {
	for _, c := range []struct {
		sfx string
		id  fileid.ID
	}{{"", f.Main}, {"-wal", f.WAL}, {"-shm", f.SHM}} {
		if c.id.IsZero() {
			continue
		}
		st, err := h.lstatAt(name + c.sfx)
		if err != nil {
			return fmt.Errorf("%s: %w: %w", h.Join(name+c.sfx), fileid.ErrIdentityChanged, err)
		}
		if got := fileid.FromStat(&st); got != c.id {
			return fmt.Errorf("%s: inode %v in the store directory, %v opened by name: %w", h.Join(name+c.sfx), got, c.id, fileid.ErrIdentityChanged)
		}
	}
	return nil
}
