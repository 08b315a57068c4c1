//go:build unix

package store

import (
	"context"
	"database/sql"
	"errors"
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
	return h.openRegular(name, unix.O_RDONLY, func(path string, st *unix.Stat_t) error {
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("open %s: not a regular file (mode %#o), not read: %w", path, st.Mode, ErrNotRegular)
		}
		return nil
	})
}

// openRegular opens name in the directory with flags plus no symlink
// following and no blocking, runs check on the fd's fstat (closing the fd
// when it refuses) and returns the file in blocking mode: the one preamble
// of OpenFile and OpenFileForWrite.
func (h *DirHandle) openRegular(name string, flags int, check func(path string, st *unix.Stat_t) error) (*os.File, error) {
	path := h.Join(name)
	fd, err := unix.Openat(h.fd, name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if err := check(path, &st); err != nil {
		unix.Close(fd)
		return nil, err
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
// A swap and swap back between the two checks (a component of the path
// made a symlink to another directory while SQLite opened it) is caught by
// the name SQLite opened: it resolves every symlink on the way once, at
// the open, and opens the sidecars by that name (sqliteOpened). Residual
// race: modernc's driver offers neither SQLITE_OPEN_NOFOLLOW nor the fd it
// opened, so a directory renamed away and another renamed in and back
// (no symlink) goes unseen; only the directory's owner can do that, inside
// directories they may write, and the opens run as the owner (AsOwner).
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
	if err == nil {
		err = sqliteOpened(v, path)
	}
	if err != nil {
		_ = v.Close() // nothing was written: the open's error is the one to report
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

// OpenFile opens the store file whose name is the main's plus sfx ("",
// "-wal", "-shm") read-only through the directory's handle (OpenDir, then
// DirHandle.OpenFile): never through a symlink, never blocking, only a
// regular file. It is for the raw reads a worker does by itself (headers,
// lock queries); the identity of what it opened is the fd's (fstat).
func (s Store) OpenFile(sfx string) (*os.File, error) {
	h, err := s.OpenDir()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return h.OpenFile(filepath.Base(s.Path) + sfx)
}

// Lstat is what the name in the directory is, without following a
// symlink; a missing name is fileid.Missing() and no error.
func (h *DirHandle) Lstat(name string) (fileid.State, error) { return inDir{h}.lstat(name) }

// OpenFileForWrite opens name in the directory write-only, without
// following a symlink, without creating it and without blocking, and keeps
// it only if it is a regular file owned by the directory's owner or root:
// the one way root writes raw bytes into a store file (FinishBackfill's
// pages), as OpenWritable is for SQLite's writes. The caller still checks
// the fd is the inode it means to write.
func (h *DirHandle) OpenFileForWrite(name string) (*os.File, error) {
	return h.openRegular(name, unix.O_WRONLY, func(path string, st *unix.Stat_t) error {
		switch owner := h.ID().UID; {
		case st.Mode&unix.S_IFMT != unix.S_IFREG:
			return fmt.Errorf("open %s: not a regular file (mode %#o), not written: %w", path, st.Mode, ErrNotRegular)
		case int(st.Uid) != owner && st.Uid != 0:
			return fmt.Errorf("open %s: %w: the file belongs to uid %d, its directory to uid %d; not written", path, ErrForeignOwner, st.Uid, owner)
		}
		return nil
	})
}

// RemoveFile unlinks the regular file at path, which must be directly in
// the store's directory, through the directory's handle (OpenDir: the one
// discovery recorded, no symlink): root never removes a name in a
// directory swapped in since. A missing file is no error.
func (s Store) RemoveFile(path string) error {
	if filepath.Dir(filepath.Clean(path)) != s.Dir() {
		return fmt.Errorf("remove %s: not in the store's directory %s", path, s.Dir())
	}
	h, err := s.OpenDir()
	if err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	defer h.Close()
	name := filepath.Base(path)
	st, err := h.lstatAt(name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("remove %s: not a regular file, left alone: %w", path, ErrNotRegular)
	}
	if err := unix.Unlinkat(h.fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "unlink", Path: path, Err: err}
	}
	return nil
}

// MainFiler is a connection OpenSQLiteIn's open may return that is neither
// a *sql.DB nor a *Writable: MainFile is the main database's file name as
// SQLite opened it (PRAGMA database_list), forcing the open now.
type MainFiler interface {
	MainFile(ctx context.Context) (string, error)
}

// mainFileQuery is the main database's path as SQLite opened it, with
// every symlink resolved.
const mainFileQuery = "SELECT file FROM pragma_database_list WHERE name = 'main'"

// MainFileOf runs mainFileQuery on q.
func MainFileOf(ctx context.Context, q Querier) (string, error) {
	rows, err := q.QueryContext(ctx, mainFileQuery)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var f string
	if rows.Next() {
		err = rows.Scan(&f)
	}
	if err == nil {
		err = rows.Err()
	}
	return f, err
}

// sqliteOpened checks that the connection v opened the file at path
// itself, not through a symlink swapped in while it was opened: SQLite
// resolves the path's symlinks when it opens the main, and path (reached
// by OpenDir) has none. For a *sql.DB this is also what makes the pool
// open its connection now, between OpenSQLiteIn's checks.
func sqliteOpened(v any, path string) error {
	ctx := context.Background()
	var f string
	var err error
	switch c := v.(type) {
	case *sql.DB:
		f, err = MainFileOf(ctx, c)
	case *Writable:
		f, err = c.mainFile(ctx)
	case MainFiler:
		f, err = c.MainFile(ctx)
	default:
		return fmt.Errorf("open %s: cannot ask SQLite which file it opened (%T)", path, v)
	}
	if err != nil {
		// This is SQLite's first read of the file (a pool opens lazily):
		// a junk or unreadable file fails here, with the operator's hint.
		return Explain(path, fmt.Errorf("read %s: %w", path, err))
	}
	if filepath.Clean(f) != path {
		return fmt.Errorf("%w: SQLite opened %s for %s: a directory on the way was swapped for a symlink while it was opened", fileid.ErrIdentityChanged, f, path)
	}
	return nil
}
