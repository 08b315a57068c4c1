//go:build !linux

package supervisor

import (
	"errors"
	"os"
)

// reopenReadOnly: only systemd has a file descriptor store, and launchd
// none; a pin lives as long as the agent there.
func reopenReadOnly(*os.File) (*os.File, error) {
	return nil, errors.ErrUnsupported
}
