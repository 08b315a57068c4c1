//go:build unix && !linux && !darwin

package store

import "golang.org/x/sys/unix"

// No OFD locks here: a process-owned lock is the closest, and the idle
// checkpoint's fd is closed before any other of the agent's on the main.
const ofdSetLK = unix.F_SETLK
