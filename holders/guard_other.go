//go:build !unix

package holders

import (
	"errors"
	"os"
)

const guardOpenFlags = 0

func isSymlinkErr(error) bool { return false }

func isLockConflict(error) bool { return false }

func dupFile(f *os.File) (*os.File, error) {
	return nil, errors.New("dup is not supported on this platform")
}
