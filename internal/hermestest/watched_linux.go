package hermestest

import (
	"bufio"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Watched is a child of the test process that the test reaps itself with
// wait4(WUNTRACED): every time anything stops it, even for an instant
// before a SIGCONT, the stop is counted (and undone) — what a test needs
// to prove that nobody ever stopped a process.
type Watched struct {
	Pid    int
	Exited chan WatchedEnd // one value once it has exited
}

// WatchedEnd is how a Watched process ended.
type WatchedEnd struct {
	Code  int // exit status, 128+signal when killed, -1 when wait4 failed
	Stops int // times it was seen stopped
}

// SpawnWatched starts argv (argv[0] an absolute path) with attr (nil for
// none), waits for the first line of its stdout to start with "ready",
// and reaps it with wait4(WUNTRACED); it is killed at cleanup.
func SpawnWatched(tb testing.TB, attr *syscall.SysProcAttr, argv ...string) *Watched {
	tb.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	p, err := os.StartProcess(argv[0], argv, &os.ProcAttr{Files: []*os.File{nil, pw, os.Stderr}, Sys: attr})
	pw.Close()
	if err != nil {
		pr.Close()
		tb.Fatal(err)
	}
	c := &Watched{Pid: p.Pid, Exited: make(chan WatchedEnd, 1)}
	go c.reap()
	tb.Cleanup(func() { _ = unix.Kill(c.Pid, unix.SIGKILL) })
	line, err := bufio.NewReader(pr).ReadString('\n')
	pr.Close()
	if err != nil || !strings.HasPrefix(line, "ready") {
		tb.Fatalf("%s (pid %d) did not say ready: %q %v", argv[0], c.Pid, line, err)
	}
	return c
}

func (c *Watched) reap() {
	var end WatchedEnd
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(c.Pid, &ws, unix.WUNTRACED, nil); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			end.Code = -1
			break
		}
		if ws.Stopped() {
			end.Stops++
			_ = unix.Kill(c.Pid, unix.SIGCONT)
			continue
		}
		end.Code = ws.ExitStatus()
		if ws.Signaled() {
			end.Code = 128 + int(ws.Signal())
		}
		break
	}
	c.Exited <- end
}

// ReadOnlyHolder starts a shell that opens path read-only on fd 3 and then
// sleeps with it open (attr sets its user), watched.
func ReadOnlyHolder(tb testing.TB, attr *syscall.SysProcAttr, path string) *Watched {
	tb.Helper()
	return SpawnWatched(tb, attr, "/bin/sh", "-c", `exec 3<"$0" && echo ready && exec sleep 600`, path)
}
