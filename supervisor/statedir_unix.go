//go:build linux || darwin

package supervisor

import (
	"errors"
	"os"
	"syscall"
)

const oNoFollow = syscall.O_NOFOLLOW

// tryLock takes an exclusive flock on f without waiting. flock locks
// belong to the open file description, so unlike POSIX record locks no
// other close() of agent.lock in this process can drop it, and the kernel
// drops it when the agent dies, however it dies.
func tryLock(f *os.File) (held bool, err error) {
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}

func unlock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
