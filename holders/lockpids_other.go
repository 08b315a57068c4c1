//go:build !linux

package holders

import (
	"errors"

	"github.com/stateguard/stateguard/fileid"
)

// LockPids needs a host-wide lock table (/proc/locks), which only Linux
// has; elsewhere the fast freeze knows only the holders the last scan saw.
func LockPids([]fileid.ID) ([]int, error) {
	return nil, errors.ErrUnsupported
}
