//go:build linux || darwin

package main

import (
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

func fileUID(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// canWrite asks the kernel whether this process may create files in dir,
// without creating one in the agent's state directory.
func canWrite(dir string) error {
	return unix.Access(dir, unix.W_OK|unix.X_OK)
}
