package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// mountTmpfs mounts a tmpfs of size on dir, mode 0700 as the capture code
// demands of a profile directory (a tmpfs root is 1777 by default).
func mountTmpfs(dir, size string) error {
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+size+",mode=0700"); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w (needs root and CAP_SYS_ADMIN)", dir, err)
	}
	return nil
}

func unmount(dir string) error {
	if err := unix.Unmount(dir, 0); err != nil {
		// Something still holds a file there; detach so the tree can go.
		return unix.Unmount(dir, unix.MNT_DETACH)
	}
	return nil
}

// stoppedState reports whether a state letter is a stopped process.
func stoppedState(s byte) bool { return s == 'T' || s == 't' }

// deletedFds lists pid's fds whose target is a deleted file under dir.
func deletedFds(pid int, dir string) ([]string, error) {
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", fdDir, err)
	}
	var out []string
	for _, e := range ents {
		t, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if strings.HasPrefix(t, dir+"/") && strings.HasSuffix(t, " (deleted)") {
			n, _ := strconv.Atoi(e.Name())
			out = append(out, fmt.Sprintf("fd %d -> %s", n, t))
		}
	}
	return out, nil
}

// inodeHeld reports whether one of pids has an fd on path's inode,
// whatever name or mount namespace it opened it under (an fd's stat is its
// inode's, so a container's bind-mounted path counts too). A process that
// exited meanwhile holds nothing; one whose fds cannot be read makes the
// answer an error, never "no".
func inodeHeld(path string, pids []int) (bool, error) {
	var want unix.Stat_t
	if err := unix.Stat(path, &want); err != nil {
		return false, err
	}
	for _, pid := range pids {
		fdDir := fmt.Sprintf("/proc/%d/fd", pid)
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue
			}
			return false, fmt.Errorf("list %s: %w", fdDir, err)
		}
		for _, fe := range fds {
			var st unix.Stat_t
			if unix.Stat(filepath.Join(fdDir, fe.Name()), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
				return true, nil
			}
		}
	}
	return false, nil
}

// childPids lists the pids (as this process sees them) of pid's children.
func childPids(pid int) ([]int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// nsPids is the NSpid line of /proc/<pid>/status: the pid in this
// namespace first, then in each nested one.
func nsPids(pid int) ([]int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			var out []int
			for _, f := range strings.Fields(rest) {
				n, err := strconv.Atoi(f)
				if err != nil {
					return nil, fmt.Errorf("/proc/%d/status: bad NSpid %q", pid, rest)
				}
				out = append(out, n)
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("/proc/%d/status: no NSpid line", pid)
}
