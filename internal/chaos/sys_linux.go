package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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

// procState is the state letter of /proc/<pid>/stat (R, S, T, t, Z, ...).
func procState(pid int) (byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may contain spaces and parentheses; the state is
	// the first field after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return b[i+2], nil
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
