package hermestest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
)

// ErrNoProc is ProcState's answer where there is no /proc to read: the
// state is unknown, which a check must never take for "running".
var ErrNoProc = errors.New("process state not readable on " + runtime.GOOS + ": needs Linux /proc")

// ProcState is the state letter of /proc/<pid>/stat (R, S, T, t, Z, ...);
// an error when the process is gone or /proc cannot say.
func ProcState(pid int) (byte, error) {
	if runtime.GOOS != "linux" {
		return 0, ErrNoProc
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces and parentheses; the state is the
	// first field after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return b[i+2], nil
}

// StateOf is ProcState for assertions: 'X' when the process is gone (or
// its state cannot be read).
func StateOf(pid int) byte {
	s, err := ProcState(pid)
	if err != nil {
		return 'X'
	}
	return s
}
