//go:build !linux

package holders

import "github.com/stateguard/stateguard/fileid"

// StartTicks is not available here: no fanotify writer pids to name.
func StartTicks(pid int) (uint64, error) { return 0, errNoSignals(ProcRef{Pid: pid}) }

// Writes reports false: only Linux reports in-place rewriters.
func Writes(ProcRef, fileid.ID) bool { return false }

// Peek is a quick look at one process's fds (Linux only).
type Peek struct {
	Ref  ProcRef
	PPid int
	Exe  string
	Open map[fileid.ID]bool
}

// PeekFDs is not available here.
func PeekFDs(pid int, _ ...fileid.ID) (Peek, error) { return Peek{}, errNoSignals(ProcRef{Pid: pid}) }
