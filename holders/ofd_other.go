//go:build !linux && !darwin

package holders

import (
	"errors"
	"os"
)

func ofdReadLock(*os.File, int64, int64) error {
	return errors.New("OFD locks are not supported on this platform")
}
