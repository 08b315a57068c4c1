//go:build !linux && !darwin

package supervisor

import (
	"errors"
	"io/fs"
	"os"
	"runtime"
)

const (
	rootStateDir   = "/var/lib/stateguard"
	rootRuntimeDir = "/var/run/stateguard"
)

const oNoFollow = 0

func fileOwner(fs.FileInfo) (int, bool) { return 0, false }

func tryLock(*os.File) (bool, error) {
	return false, errors.New("single-instance lock is not implemented on " + runtime.GOOS)
}

func unlock(*os.File) error { return nil }
