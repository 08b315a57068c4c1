//go:build unix

package recovery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/store"
)

// ErrUnsafeDir marks a directory stateguard refuses to write into: a
// symlink, or writable by others (anyone could plant a symlink or swap a
// file between our checks and our writes).
var ErrUnsafeDir = errors.New("unsafe directory")

// capDir is a directory opened once with O_NOFOLLOW and used only through
// *at system calls, so a path component swapped after the checks cannot
// redirect a write.
type capDir struct {
	path string
	fd   int
	// store: opened by openStoreDir, so verify re-checks it against want
	// (or its own identity at the open when want is zero).
	store bool
	want  store.DirID
}

// openVettedDir opens path as a directory, refusing a symlink and a
// directory others may write to.
func openVettedDir(path string) (capDir, error) {
	path = filepath.Clean(path)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
				return capDir{}, fmt.Errorf("%w: %s is a symlink: stateguard writes only into the real directory; point the store at its resolved path", ErrUnsafeDir, path)
			}
		}
		return capDir{}, fmt.Errorf("open directory %s: %w", path, err)
	}
	d := capDir{path: path, fd: fd}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		d.close()
		return capDir{}, fmt.Errorf("stat directory %s: %w", path, err)
	}
	if st.Mode&0o002 != 0 {
		d.close()
		return capDir{}, fmt.Errorf("%w: %s is writable by others (mode %#o): fix it with \"chmod o-w %s\" and retry", ErrUnsafeDir, path, st.Mode&0o7777, path)
	}
	return d, nil
}

// openStoreDir opens a store's directory (or a directory under it) the
// way every step must reach one: no symlink in any component of path
// (store.OpenDir), the inode and owner discovery recorded when want is
// set, and not writable by others.
func openStoreDir(path string, want store.DirID) (capDir, error) {
	h, err := store.OpenDir(path, want)
	if errors.Is(err, store.ErrSymlinkInPath) {
		return capDir{}, fmt.Errorf("%w: %w", ErrUnsafeDir, err)
	}
	if err != nil {
		return capDir{}, err
	}
	if want.IsZero() {
		want = h.ID()
	}
	d := capDir{path: h.Path(), fd: h.Detach(), store: true, want: want}
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		d.close()
		return capDir{}, fmt.Errorf("stat directory %s: %w", path, err)
	}
	if st.Mode&0o002 != 0 {
		d.close()
		return capDir{}, fmt.Errorf("%w: %s is writable by others (mode %#o): fix it with \"chmod o-w %s\" and retry", ErrUnsafeDir, path, st.Mode&0o7777, path)
	}
	return d, nil
}

// verify re-checks a store directory before a step publishes into it: the
// fd is still the recorded inode and owner, and the path still leads to it
// without a symlink. A directory renamed away or swapped during the step
// aborts the step; what the step already wrote is in the directory the fd
// names, never elsewhere.
func (d capDir) verify() error {
	if !d.store {
		return nil
	}
	h, err := store.OpenDir(d.path, d.want)
	if err != nil {
		return err
	}
	defer h.Close()
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return fmt.Errorf("stat directory %s: %w", d.path, err)
	}
	if got := (store.DirID{ID: fileid.FromStat(&st), UID: int(st.Uid), GID: int(st.Gid)}); got.ID != d.want.ID || got.UID != d.want.UID {
		return &store.DirChangedError{Path: d.path, Want: d.want, Got: got}
	}
	return nil
}

// readDir lists the directory the fd names (not whatever is at its path
// now), through a fresh fd of its own so d's offset is untouched.
func (d capDir) readDir() ([]os.DirEntry, error) {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", d.path, err)
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", d.path, err)
	}
	return ents, nil
}

// openChildDir opens the directory name inside d without following a symlink.
func (d capDir) openChildDir(name string) (capDir, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return capDir{}, fmt.Errorf("open directory %s: %w", d.join(name), err)
	}
	sub := capDir{path: d.join(name), fd: fd}
	if d.store {
		// A directory under a store directory is checked the same way,
		// against what it is now.
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			sub.close()
			return capDir{}, fmt.Errorf("stat directory %s: %w", sub.path, err)
		}
		sub.store, sub.want = true, store.DirID{ID: fileid.FromStat(&st), UID: int(st.Uid), GID: int(st.Gid)}
	}
	return sub, nil
}

func (d capDir) close() {
	if d.fd > 0 {
		_ = unix.Close(d.fd)
	}
}

func (d capDir) join(name string) string { return filepath.Join(d.path, name) }

// lstat stats name in d without following a symlink.
func (d capDir) lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

func (d capDir) exists(name string) bool {
	_, err := d.lstat(name)
	return err == nil || !errors.Is(err, unix.ENOENT)
}

// createExcl creates name in d: O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600
// whatever the umask, owned by owner.
func (d capDir) createExcl(name string, owner Owner) (*os.File, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", d.join(name), err)
	}
	f := os.NewFile(uintptr(fd), d.join(name))
	if err := fixModeOwner(fd, 0o600, owner); err != nil {
		f.Close()
		_ = unix.Unlinkat(d.fd, name, 0)
		return nil, fmt.Errorf("set owner of %s: %w", d.join(name), err)
	}
	return f, nil
}

// mkdir creates the directory name in d with mode 0700, owned by owner.
func (d capDir) mkdir(name string, owner Owner) (capDir, error) {
	if err := unix.Mkdirat(d.fd, name, 0o700); err != nil {
		return capDir{}, err
	}
	sub, err := d.openChildDir(name)
	if err == nil {
		err = fixModeOwner(sub.fd, 0o700, owner)
	}
	if err != nil {
		sub.close()
		_ = unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR)
		return capDir{}, fmt.Errorf("prepare %s: %w", d.join(name), err)
	}
	return sub, nil
}

// maxRemoveDepth bounds removeAll's descent: a divert's staging directory
// is two levels deep; a deeper tree there is not stateguard's.
const maxRemoveDepth = 8

// removeAll removes name in d and, when it is a directory, everything
// under it, through d's fd and fds of the subdirectories (never a path,
// never a symlink followed): what it removes is inside the directory d
// names even when the path to d was swapped since d was opened.
func (d capDir) removeAll(name string) error {
	if err := removeAllAt(d.fd, name, d.join(name), maxRemoveDepth); err != nil {
		return fmt.Errorf("remove %s: %w", d.join(name), err)
	}
	return nil
}

func removeAllAt(parent int, name, path string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unix.Unlinkat(parent, name, 0)
	}
	if depth == 0 {
		return fmt.Errorf("%s is nested deeper than %d directories: not removed (remove it by hand)", path, maxRemoveDepth)
	}
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := removeAllAt(fd, n, filepath.Join(path, n), depth-1); err != nil {
			return err
		}
	}
	return unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
}

func (d capDir) sync() error {
	if err := unix.Fsync(d.fd); err != nil {
		return fmt.Errorf("fsync directory %s: %w", d.path, err)
	}
	return nil
}

// fixModeOwner sets an exact mode (umask would otherwise narrow it) and
// the owner, touching the owner only when it differs: an unprivileged
// agent can then still write captures for its own user.
func fixModeOwner(fd int, mode uint32, owner Owner) error {
	if err := unix.Fchmod(fd, mode); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if int(st.Uid) == owner.UID && int(st.Gid) == owner.GID {
		return nil
	}
	return unix.Fchown(fd, owner.UID, owner.GID)
}

// fstatFile fstats an *os.File through its raw fd without changing the
// file's blocking mode (f.Fd() would).
func fstatFile(f *os.File) (unix.Stat_t, error) {
	var st unix.Stat_t
	rc, err := f.SyscallConn()
	if err != nil {
		return st, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) }); err != nil {
		return st, err
	}
	return st, serr
}

// openNoFollow opens path read-only, refusing a symlink in its last
// component and anything but a regular file. The open never blocks: a
// FIFO put at the name (a user owns the directories the agent reads in)
// would make a plain open wait for a writer forever.
func openNoFollow(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return regularFile(fd, path)
}

// openatRegular is openNoFollow for name in directory d.
func openatRegular(d capDir, name string) (*os.File, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d.join(name), Err: err}
	}
	return regularFile(fd, d.join(name))
}

// regularFile keeps fd only if fstat says it is a regular file, and makes
// it blocking again (reads of a regular file never wait anyway).
func regularFile(fd int, path string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("open %s: not a regular file (mode %#o), not read: %w", path, st.Mode, store.ErrNotRegular)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

func isNoSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}

func isExist(err error) bool {
	return errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY)
}

func isRegular(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFREG }
func isDir(st *unix.Stat_t) bool     { return st.Mode&unix.S_IFMT == unix.S_IFDIR }
func isSymlink(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFLNK }

// renameCheckFirst is renameNoReplace where the kernel cannot refuse to
// replace: it checks, then renames.
func renameCheckFirst(oldDir int, oldName string, newDir int, newName string) error {
	var st unix.Stat_t
	err := unix.Fstatat(newDir, newName, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil {
		return unix.EEXIST
	}
	if !errors.Is(err, unix.ENOENT) {
		return err
	}
	return unix.Renameat(oldDir, oldName, newDir, newName)
}

// openStorePath is openStoreDir for a step that has no discovery record to
// compare with: still no symlink anywhere in the path.
func openStorePath(path string) (capDir, error) { return openStoreDir(path, store.DirID{}) }

// allocBytes is what st's file takes on disk (st_blocks are 512 bytes on
// every system this builds for).
func allocBytes(st *unix.Stat_t) int64 { return int64(st.Blocks) * 512 }
