package holders

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// openRef opens a pidfd on p and proves it is the process that was
// scanned: the pidfd is taken first and the start time checked after, so
// a pid recycled before the open shows another start time, and one
// recycled after cannot be reached through the pidfd.
func openRef(p ProcRef) (int, error) {
	if p.Pid <= 0 {
		return -1, fmt.Errorf("pid %d: %w", p.Pid, ErrProcessGone)
	}
	if p.Pid == os.Getpid() {
		return -1, fmt.Errorf("pid %d is stateguard itself: refusing to signal it", p.Pid)
	}
	fd, err := unix.PidfdOpen(p.Pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return -1, fmt.Errorf("pid %d: %w", p.Pid, ErrProcessGone)
		}
		return -1, fmt.Errorf("pidfd_open %d: %w (Linux 5.3 or later is needed to signal safely)", p.Pid, err)
	}
	st, err := readStat(p.Pid)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.StartTicks != p.StartTicks {
		unix.Close(fd)
		return -1, fmt.Errorf("pid %d started at tick %d, not %d: %w", p.Pid, st.StartTicks, p.StartTicks, ErrProcessGone)
	}
	return fd, nil
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return procStat{}, fmt.Errorf("pid %d: %w", pid, ErrProcessGone)
		}
		return procStat{}, fmt.Errorf("read /proc/%d/stat: %w", pid, err)
	}
	st, err := parseProcStat(b)
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// Signal sends sig to p through a pidfd, after checking that p's pid still
// names the process that started at p.StartTicks. A recycled or exited pid
// gives ErrProcessGone and nothing is signalled.
func Signal(p ProcRef, sig syscall.Signal) error {
	fd, err := openRef(p)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("pid %d: %w", p.Pid, ErrProcessGone)
		}
		return fmt.Errorf("signal %v to pid %d: %w", sig, p.Pid, err)
	}
	return nil
}

// Freeze stops p (SIGSTOP). It cannot be caught or ignored.
func Freeze(p ProcRef) error { return Signal(p, unix.SIGSTOP) }

// Thaw resumes a frozen p (SIGCONT).
func Thaw(p ProcRef) error { return Signal(p, unix.SIGCONT) }

// Kill ends p with SIGKILL; a frozen process dies without running any
// more of its code (no close-time checkpoint).
func Kill(p ProcRef) error { return Signal(p, unix.SIGKILL) }

// Terminate asks p to exit (SIGTERM). A frozen process acts on it only
// after Thaw.
func Terminate(p ProcRef) error { return Signal(p, unix.SIGTERM) }

// State returns p's state letter from /proc/<pid>/stat (R, S, D, T, t, Z,
// ...), or ErrProcessGone if p has exited or its pid was recycled.
func State(p ProcRef) (byte, error) {
	st, err := readStat(p.Pid)
	if err != nil {
		return 0, err
	}
	if st.StartTicks != p.StartTicks {
		return 0, fmt.Errorf("pid %d: %w", p.Pid, ErrProcessGone)
	}
	return st.State, nil
}

// WaitStopped polls until p is stopped (T, or t under a tracer), until
// ctx ends, or until p is gone.
func WaitStopped(ctx context.Context, p ProcRef) error {
	delay := 50 * time.Microsecond
	for {
		s, err := State(p)
		if err != nil {
			return err
		}
		if s == 'T' || s == 't' {
			return nil
		}
		if s == 'Z' || s == 'X' {
			return fmt.Errorf("pid %d exited while waiting for it to stop: %w", p.Pid, ErrProcessGone)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("pid %d not stopped (state %c): %w", p.Pid, s, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 5*time.Millisecond)
	}
}

// WaitGone waits until p has exited (a zombie holds no files and counts as
// gone), or ctx ends. It polls a pidfd, which becomes readable when the
// process exits.
func WaitGone(ctx context.Context, p ProcRef) error {
	fd, err := openRef(p)
	if errors.Is(err, ErrProcessGone) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for {
		// Wake at least every 50 ms to notice a cancelled ctx.
		wait := 50 * time.Millisecond
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, max(time.Until(d), 0))
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int((wait+time.Millisecond-1)/time.Millisecond))
		if err != nil && err != unix.EINTR {
			return fmt.Errorf("poll pidfd of %d: %w", p.Pid, err)
		}
		if n > 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("pid %d still running: %w", p.Pid, err)
		}
	}
}
