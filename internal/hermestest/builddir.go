package hermestest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binaries a test process builds (the writer, agentd, agentctl) go into
// directories made by BuildDir, and Main removes them when the process's
// tests are done: left behind, every `go test` run added another copy
// (1,600 directories, 15 GB on the team machine). A test process that
// never reaches the end of Main (killed, timed out) leaves its
// directories to the next one: each holds a lock file its process keeps
// flock'ed while it lives, and BuildDir's first call removes those whose
// lock is free.

// buildDirPrefix names the directories; only these are ever swept.
const buildDirPrefix = "stateguard-build-"

// sweepAge keeps the sweep off a directory so new that its process may
// not have locked it yet.
const sweepAge = time.Minute

var built struct {
	mu    sync.Mutex
	swept bool
	dirs  []string
	locks []*os.File
}

// BuildDir makes a directory, named after what, for binaries the calling
// test process builds; Main (or RunWithOFDLocks) removes it when the
// tests end. The directory is readable by everyone, so a test helper
// that drops to another user can still run what is in it.
func BuildDir(what string) (string, error) {
	built.mu.Lock()
	defer built.mu.Unlock()
	if !built.swept {
		built.swept = true
		sweepBuildDirs(os.TempDir())
	}
	dir, err := os.MkdirTemp("", buildDirPrefix+what+"-")
	if err != nil {
		return "", fmt.Errorf("make a directory for the test %s binary: %w", what, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("lock the test build directory %s: %w", dir, err)
	}
	_ = os.Chmod(dir, 0o755)
	built.dirs, built.locks = append(built.dirs, dir), append(built.locks, lock)
	return dir, nil
}

// RemoveBuilt removes every directory BuildDir made in this process.
func RemoveBuilt() error {
	built.mu.Lock()
	defer built.mu.Unlock()
	var errs []error
	for i, dir := range built.dirs {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove test build directory: %w", err))
		}
		built.locks[i].Close()
	}
	built.dirs, built.locks = nil, nil
	return errors.Join(errs...)
}

// Main is the TestMain of a package whose tests build binaries: it runs
// the tests, removes what they built and exits with their code.
func Main(m *testing.M) { os.Exit(runAndRemoveBuilt(m)) }

func runAndRemoveBuilt(m *testing.M) int {
	code := m.Run()
	if err := RemoveBuilt(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// sweepBuildDirs removes the build directories under tmp of test
// processes that are gone: their lock is free, and they are not new.
func sweepBuildDirs(tmp string) {
	dirs, _ := filepath.Glob(filepath.Join(tmp, buildDirPrefix+"*"))
	for _, dir := range dirs {
		st, err := os.Lstat(dir)
		if err != nil || !st.IsDir() || time.Since(st.ModTime()) < sweepAge {
			continue
		}
		lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR, 0)
		if err != nil {
			continue // not ours, or not finished being made
		}
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			os.RemoveAll(dir)
		}
		lock.Close()
	}
}
