//go:build !linux

package main

import (
	"errors"
	"runtime"
)

// errNoProcState is what the process and fd checks say where they cannot
// look: "unknown", never "clear".
var errNoProcState = errors.New("not checked on " + runtime.GOOS + ": needs Linux /proc")

func mountTmpfs(dir, size string) error {
	return errors.New("tmpfs mounts for the full-disk fault are Linux-only here")
}

func unmount(dir string) error { return nil }

func stoppedState(s byte) bool { return s == 'T' }

func deletedFds(pid int, dir string) ([]string, error) { return nil, errNoProcState }

func inodeHeld(path string, pids []int) (bool, error) { return false, errNoProcState }

func childPids(pid int) ([]int, error) { return nil, errNoProcState }

func nsPids(pid int) ([]int, error) { return nil, errNoProcState }
