package store

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

func needImpersonation(uid int) bool { return os.Geteuid() == 0 && uid != 0 }

func asOwner(uid, gid int, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread's credentials differ from the
		// process's, so it must die with this goroutine.
		runtime.LockOSThread()
		if err := setThreadFSIdentity(uid, gid); err != nil {
			if ferr := fn(); ferr != nil {
				done <- fmt.Errorf("%w (%w: %w)", ferr, ErrNoImpersonation, err)
				return
			}
			done <- nil
			return
		}
		done <- fn()
	}()
	return <-done
}

// setThreadFSIdentity uses the raw system calls: glibc and Go's syscall
// package apply setgroups/setfsuid to every thread, these to this one.
func setThreadFSIdentity(uid, gid int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(gid), 0, 0)
	if g, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0); int(g) != gid {
		return fmt.Errorf("setfsgid %d: still %d", gid, int(g))
	}
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0)
	if u, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0); int(u) != uid {
		return fmt.Errorf("setfsuid %d: still %d", uid, int(u))
	}
	return nil
}
