//go:build !linux

package holders

import (
	"fmt"
	"os"
	"runtime"

	"github.com/stateguard/stateguard/fileid"
)

// Pin needs /proc/<pid>/fd; on macOS the supervisor keeps its own fds on
// each current generation instead.
func Pin(pid, fd int, _ fileid.ID) (*os.File, error) {
	return nil, fmt.Errorf("pin fd %d of pid %d: not possible on %s", fd, pid, runtime.GOOS)
}

// PinMapped needs /proc/<pid>/map_files.
func PinMapped(pid int, _ fileid.ID) (*os.File, error) {
	return nil, fmt.Errorf("pin a mapping of pid %d: not possible on %s", pid, runtime.GOOS)
}

// PinAs is Pin (see pin_linux.go).
func PinAs(pid, fd int, want fileid.ID, _ func(func() error) error) (*os.File, error) {
	return Pin(pid, fd, want)
}

// PinMappedAs is PinMapped (see pin_linux.go).
func PinMappedAs(pid int, want fileid.ID, _ func(func() error) error) (*os.File, error) {
	return PinMapped(pid, want)
}

// FileBirth is 0 here: birth times are read through Linux's statx.
func FileBirth(*os.File) int64 { return 0 }
