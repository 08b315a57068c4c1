//go:build unix

package recovery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A private copy's directory (PrivateCopy) is <tmp>/stateguard-capture-*,
// a divert's copy of a capture at its WAL cut (rowsAtCut) is
// <tmp>/stateguard-cut-*; privateOwnerFile in either names the pid that
// made it, so a copy left by a process killed mid-divert can be told from
// one in use. Both are removed with a defer, which a kill -9 skips.
const (
	privatePrefix    = "stateguard-capture-"
	cutPrefix        = "stateguard-cut-"
	privateOwnerFile = "owner.pid"
	// privateUnmarkedAge: a copy without an owner file (made before
	// there was one) is stale once it is this old.
	privateUnmarkedAge = time.Hour
)

// privatePrefixes are the temporary directories CleanPrivateCopies looks at.
var privatePrefixes = []string{privatePrefix, cutPrefix}

// makePrivateDir makes a new directory under tmpDir named prefix*, with
// the owner file naming this process, and opens it. Whoever makes it owns
// it: the agent, or the profile's owner when the step runs as that user
// (store.AsOwner).
func makePrivateDir(tmpDir, prefix string) (d capDir, owner Owner, err error) {
	path, err := os.MkdirTemp(tmpDir, prefix)
	if err != nil {
		return capDir{}, Owner{}, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(path)
		}
	}()
	if d, err = openVettedDir(path); err != nil {
		return capDir{}, Owner{}, err
	}
	var st unix.Stat_t
	if err = unix.Fstat(d.fd, &st); err != nil {
		d.close()
		return capDir{}, Owner{}, fmt.Errorf("stat %s: %w", path, err)
	}
	owner = Owner{UID: int(st.Uid), GID: int(st.Gid)}
	if err = writePrivateOwner(d, owner); err != nil {
		d.close()
		return capDir{}, Owner{}, err
	}
	return d, owner, nil
}

func writePrivateOwner(d capDir, owner Owner) error {
	f, err := d.createExcl(privateOwnerFile, owner)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// CleanPrivateCopies removes the private copies and copies at a cut under
// tmpDir ("" for the system's) that this user's processes (all users', as
// root) left behind: the process named in
// the copy's owner file is gone (a kill -9 during a divert), or, without
// one, the copy is over an hour old. A directory whose owner file is not
// a small regular file (a FIFO, a symlink to /dev/zero: no stateguard
// process wrote it) is removed too, and named in the error. A symlink,
// another user's directory or one whose owner still runs is left alone.
// No read can block or grow: the owner file is opened
// O_NOFOLLOW|O_NONBLOCK in the directory opened without symlinks, checked
// regular and read to at most privateOwnerMax bytes. It returns what it
// removed.
func CleanPrivateCopies(tmpDir string) ([]string, error) {
	if tmpDir == "" {
		tmpDir = os.TempDir()
	}
	ents, err := os.ReadDir(tmpDir)
	if err != nil {
		return nil, fmt.Errorf("clean private copies in %s: %w", tmpDir, err)
	}
	var removed []string
	var errs error
	for _, e := range ents {
		if !hasPrivatePrefix(e.Name()) || e.Type() != os.ModeDir {
			continue
		}
		dir := filepath.Join(tmpDir, e.Name())
		stale, bad := stalePrivate(dir)
		if !stale {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = errors.Join(errs, fmt.Errorf("remove stale private copy %s: %w", dir, err))
			continue
		}
		if bad != nil {
			errs = errors.Join(errs, fmt.Errorf("private copy %s removed: %w", dir, bad))
		}
		removed = append(removed, dir)
	}
	return removed, errs
}

func hasPrivatePrefix(name string) bool {
	for _, p := range privatePrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// privateOwnerMax bounds the owner file's read: a pid and a newline.
const privateOwnerMax = 32

// errBadOwnerFile: the owner file is not what makePrivateDir writes.
var errBadOwnerFile = errors.New("owner file is not a small regular file stateguard wrote")

// stalePrivate reports whether dir is a leftover to remove; bad says why
// when its owner file is not one stateguard wrote (it is removed then).
func stalePrivate(dir string) (stale bool, bad error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, nil
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	// As root, a copy made as a profile's owner (store.AsOwner) is that
	// user's directory; RemoveAll never follows a symlink inside it.
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || (int(st.Uid) != os.Geteuid() && os.Geteuid() != 0) {
		return false, nil
	}
	b, err := readOwnerFile(fd)
	switch {
	case errors.Is(err, unix.ENOENT):
		return time.Since(time.Unix(st.Mtim.Unix())) > privateUnmarkedAge, nil
	case errors.Is(err, errBadOwnerFile), errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENXIO):
		return true, fmt.Errorf("%s/%s: %w", dir, privateOwnerFile, err)
	case err != nil:
		return false, nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && pid != os.Getpid() && !processAlive(pid), nil
}

// readOwnerFile reads the owner file in the directory fd without
// following a symlink, blocking on a FIFO or reading a device.
func readOwnerFile(dirfd int) ([]byte, error) {
	fd, err := unix.Openat(dirfd, privateOwnerFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > privateOwnerMax {
		return nil, fmt.Errorf("%w (mode %#o, %d bytes)", errBadOwnerFile, st.Mode&unix.S_IFMT, st.Size)
	}
	b := make([]byte, privateOwnerMax+1)
	n, err := unix.Read(fd, b)
	if err != nil {
		return nil, err
	}
	return b[:n], nil
}
