//go:build !linux

package holders

import (
	"os"

	"github.com/stateguard/stateguard/fileid"
)

// lstatFile is lstat(2); the birth time is not used here.
func lstatFile(path string) (fileid.State, int64, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileid.State{}, 0, err
	}
	return fileid.Of(fi), 0, nil
}
