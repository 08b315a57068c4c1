package holders

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// Pin opens a read-only fd of our own on the inode that process pid holds
// as fd, through /proc/<pid>/fd/<fd>, and checks it is want. While the
// returned file is open the inode outlives its holder. Read it with
// ReadAt/pread only; never open that path (or the file) with SQLite, which
// would resolve the link text and create a new file named "... (deleted)".
func Pin(pid, fd int, want fileid.ID) (*os.File, error) { return PinAs(pid, fd, want, nil) }

// PinAs is Pin whose open of the inode runs inside as (nil: plainly):
// the caller's way to open it with the file's owner's identity
// (store.AsOwner), so the kernel refuses a pin of a file that owner could
// not read. Finding the inode through /proc/<pid> stays the agent's: it
// needs the agent's access to the holder, which may be anyone's process.
func PinAs(pid, fd int, want fileid.ID, as func(open func() error) error) (*os.File, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/fd/" + strconv.Itoa(fd)
	return pinPath(pid, path, want, as)
}

// PinMapped pins an inode that pid only maps (no fd), through
// /proc/<pid>/map_files/<range>. That needs CAP_SYS_ADMIN (root).
func PinMapped(pid int, want fileid.ID) (*os.File, error) { return PinMappedAs(pid, want, nil) }

// PinMappedAs is PinMapped with the open inside as (see PinAs).
func PinMappedAs(pid int, want fileid.ID, as func(open func() error) error) (*os.File, error) {
	maps := "/proc/" + strconv.Itoa(pid) + "/maps"
	b, err := os.ReadFile(maps)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("pin mapping of pid %d: %w", pid, ErrProcessGone)
		}
		return nil, fmt.Errorf("read %s: %w", maps, err)
	}
	var firstErr error
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		e, ok := parseMapsLine(line)
		if !ok || e.Ino != want.Ino {
			continue
		}
		f, err := pinPath(pid, "/proc/"+strconv.Itoa(pid)+"/map_files/"+string(e.Range), want, as)
		if err == nil {
			return f, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return nil, fmt.Errorf("pid %d maps no inode %v: %w", pid, want, fileid.ErrIdentityChanged)
}

func pinPath(pid int, path string, want fileid.ID, as func(open func() error) error) (*os.File, error) {
	if as == nil {
		as = func(open func() error) error { return open() }
	}
	// The link is first opened O_PATH and checked: it may name another
	// file than want by now (the fd was closed and reused), such as the
	// -shm of a store the agent has SQLite connections on, and closing a
	// real fd of that file would drop every POSIX lock this process holds
	// on it (SQLite's -shm locks are POSIX locks). An O_PATH fd holds no
	// open of the file, and its close drops no lock.
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			if _, serr := os.Stat("/proc/" + strconv.Itoa(pid)); serr != nil {
				return nil, fmt.Errorf("pin %s: %w", path, ErrProcessGone)
			}
			return nil, fmt.Errorf("pin %s: no longer open: %w", path, fileid.ErrIdentityChanged)
		}
		return nil, fmt.Errorf("pin %s: %w (pinning another user's file needs root)", path, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, fmt.Errorf("fstat pinned %s: %w", path, err)
	}
	if got := fileid.FromStat(&st); got != want || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("pin %s: inode %v (mode %#o), want the regular file %v: %w", path, got, st.Mode, want, fileid.ErrIdentityChanged)
	}
	// Reopened through the O_PATH fd: the same inode, checked above.
	// O_NOATIME keeps the pin from touching the inode; only the owner or
	// CAP_FOWNER may use it, so retry without. O_NOCTTY for good measure.
	self := "/proc/self/fd/" + strconv.Itoa(pfd)
	const flags = unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY
	fd := -1
	err = as(func() (err error) {
		fd, err = unix.Open(self, flags|unix.O_NOATIME, 0)
		if errors.Is(err, unix.EPERM) {
			fd, err = unix.Open(self, flags, 0)
		}
		return err
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("pin %s (mode %#o, uid %d): %w (the agent opens a pin as the store's owner: a file that owner cannot read is not pinned)", path, st.Mode&0o7777, st.Uid, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// FileBirth is f's birth time (statx btime, ns), 0 when the filesystem
// keeps none: what a KnownFile's Birth is set from for an inode the
// caller has open.
func FileBirth(f *os.File) int64 {
	var stx unix.Statx_t
	if unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_INO|unix.STATX_BTIME, &stx) != nil {
		return 0
	}
	return statxBirth(&stx)
}
