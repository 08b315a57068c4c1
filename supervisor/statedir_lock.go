package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/stateguard/stateguard/control"
)

// ErrAlreadyRunning is returned by AcquireLock when another process holds
// the state directory's lock.
var ErrAlreadyRunning = errors.New("another agentd is already running on this state directory")

// Lock is the single-instance lock on a state directory: two agents
// freezing and signalling the same holders, or writing one journal, would
// undo each other's work.
type Lock struct {
	mu   sync.Mutex
	path string
	f    *os.File
}

// AcquireLock takes the exclusive lock on <stateDir>/agent.lock without
// waiting and writes this process's pid into it for the next acquirer's
// error message. The lock lives as long as the process or until Release;
// a crashed agent's lock is released by the kernel.
func AcquireLock(stateDir string) (*Lock, error) {
	path := filepath.Join(stateDir, control.LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|oNoFollow, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w (is the state directory prepared and owned by this user?)", path, err)
	}
	busy, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if busy {
		holder := readLockPid(f)
		f.Close()
		return nil, fmt.Errorf("%w: %s is held by %s; stop that agentd first, or give this one another state directory", ErrAlreadyRunning, path, holder)
	}
	if err := writeLockPid(f); err != nil {
		_ = unlock(f) // the pid write's error is the one to report; the close drops the lock anyway
		f.Close()
		return nil, fmt.Errorf("write pid to lock %s: %w", path, err)
	}
	return &Lock{path: path, f: f}, nil
}

// Path is the lock file's path.
func (l *Lock) Path() string { return l.path }

// Release drops the lock. It is safe to call more than once and on nil.
func (l *Lock) Release() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	// Clear the pid while still holding the lock so no reader ever sees
	// ours next to another holder; the file itself stays, since removing
	// it would let two agents lock two different inodes of the same name.
	terr := l.f.Truncate(0)
	uerr := unlock(l.f)
	cerr := l.f.Close()
	l.f = nil
	if err := errors.Join(terr, uerr, cerr); err != nil {
		return fmt.Errorf("release lock %s: %w", l.path, err)
	}
	return nil
}

func writeLockPid(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		return err
	}
	return f.Sync()
}

// readLockPid describes the lock's holder for an error message. The holder
// may not have written its pid yet, so an empty file is not an error.
func readLockPid(f *os.File) string {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	s := strings.TrimSpace(string(buf[:n]))
	if pid, err := strconv.Atoi(s); err == nil && pid > 0 {
		return "pid " + strconv.Itoa(pid)
	}
	return "another process (pid not yet written)"
}
