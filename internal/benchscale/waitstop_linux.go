package main

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// cldStopped is si_code CLD_STOPPED: the child was stopped by a signal.
const cldStopped = 5

// errGoneFirst: the writer was no longer stopped, but exited, when the
// bench's waitid ran; the trial measured nothing (under load the agent's
// kill policy can end the writer before the bench's thread gets a CPU).
var errGoneFirst = errors.New("writer exited before the bench saw it stopped")

// stopped is what watchStop saw: when waitid returned, or why it failed.
type stopped struct {
	at  time.Time
	err error
}

// watchStop starts waiting, in the kernel, for the child pid to stop
// (waitid WSTOPPED, WNOWAIT: its exit is still Wait's). Called before the
// rename, so the waiting thread is already asleep on the child when the
// agent's SIGSTOP completes, and the kernel wakes it then: nothing is
// started, and no goroutine scheduled, between the rename and the stop.
func watchStop(pid int) <-chan stopped {
	res := make(chan stopped, 1)
	go func() {
		var si unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, pid, &si, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT, nil)
			at := time.Now()
			if err == unix.EINTR {
				continue
			}
			if err == unix.ECHILD || (err == nil && si.Code != cldStopped) {
				err = errGoneFirst
			}
			res <- stopped{at: at, err: err}
			return
		}
	}()
	return res
}
