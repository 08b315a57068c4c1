package holders

import (
	"fmt"
	"os"

	"github.com/stateguard/stateguard/fileid"
)

// LockPids lists the processes that hold a POSIX lock on one of ids, from
// /proc/locks: every SQLite connection holds one on its -shm and its main
// for as long as it has the store open, so this finds, in one read, a
// connection that opened a store after the last scan. The agent itself
// (its locks are OFD locks anyway) is never listed.
func LockPids(ids []fileid.ID) ([]int, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return nil, fmt.Errorf("read the lock table: %w", err)
	}
	return lockPidsIn(b, ids, os.Getpid()), nil
}
