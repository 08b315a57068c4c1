package store

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// InPrivateFDTable runs f on a thread of its own whose file table is a
// private copy of the process's (unshare(CLONE_FILES)), and returns when
// f has. A close(2) of any fd of a file drops every POSIX lock the
// closing file table owns on it, and SQLite's locks on a -shm are POSIX
// locks even with OFD locking on (modernc switches the main file's only):
// the files f opens and closes there are opened and closed in that table,
// so they cannot drop a lock of any SQLite connection of this process.
// The thread ends with f (it is never unlocked), and its copies of the
// process's fds with it.
//
// f must close every file it opens before it returns, must not hand an
// fd out (its number means something in the private table only) and must
// not open anything Go's poller would register (store.OpenFile and the
// DirHandle's files are blocking, so they are not). The error is the
// unshare's: then f did not run.
func InPrivateFDTable(f func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if unix.Gettid() != unix.Getpid() {
			errc <- runPrivate(f)
			return
		}
		// The main thread is the process's face in /proc/self (what
		// holder scans and lsof read): its table must stay the
		// process's, and Go wedges rather than ends a locked main
		// thread, so a private copy made there would keep every fd
		// open at that moment (and their OFD locks) for the life of
		// the process. The inner goroutine locks a thread while this
		// one still holds the main thread, so it cannot get the main
		// thread itself.
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			errc <- runPrivate(f)
		}()
		<-locked
		runtime.UnlockOSThread()
	}()
	return <-errc
}

func runPrivate(f func()) error {
	if unix.Gettid() == unix.Getpid() {
		return errors.New("unshare(CLONE_FILES): refused on the main thread")
	}
	if err := unix.Unshare(unix.CLONE_FILES); err != nil {
		return fmt.Errorf("unshare(CLONE_FILES): %w", err)
	}
	f()
	return nil
}
