package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// containerScript runs inside the new namespaces: bind-mount the profile
// directory ($1) at the volume path ($2), then run the writer as a child
// (sh is the namespace's init, pid 1) and exit with its status, so
// unshare's exit status is the writer's (128+n for a signal n).
const containerScript = `mount --bind "$1" "$2" || exit 97; shift 2; "$@"; exit $?`

// containerProc is one test writer in its own mount and pid namespaces,
// started as `unshare --mount --pid --fork --kill-child --propagation
// private` with the profile directory bind-mounted at another path: a
// gateway in a container with the profile home as its volume. Its fds name
// files by the volume path, which on the host is an empty directory; its
// ack file is a host path, visible inside since the mount namespace starts
// as a copy of the host's.
type containerProc struct {
	cmd     *exec.Cmd // unshare
	hostPid int       // the writer as the host (and agentd) sees it
	done    chan struct{}
	waitErr error
}

// spawnContainerWriter starts the writer bin in a container with dir
// bind-mounted at volume; o.DB must be the path inside (under volume). It
// returns once the writer acknowledged its first commit.
func spawnContainerWriter(unshare, bin string, o hermestest.WriterOptions, dir, volume string, timeout time.Duration) (*containerProc, error) {
	args := []string{"--mount", "--pid", "--fork", "--kill-child", "--propagation", "private",
		"sh", "-c", containerScript, "chaos-container", dir, volume, bin}
	cmd := exec.Command(unshare, append(args, o.Args()...)...)
	cmd.Stderr = o.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", unshare, err)
	}
	c := &containerProc{cmd: cmd, done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, err := r.ReadString('\n')
		switch {
		case err != nil:
			ready <- fmt.Errorf("container writer exited before ready: %w", err)
		case !strings.HasPrefix(line, "ready "):
			ready <- fmt.Errorf("container writer said %q, want ready", line)
		default:
			ready <- nil
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	go func() {
		c.waitErr = cmd.Wait()
		close(c.done)
	}()
	fail := func(err error) (*containerProc, error) {
		c.Kill()
		<-c.done
		return nil, err
	}
	select {
	case err := <-ready:
		if err != nil {
			return fail(fmt.Errorf("%w (wait: %v)", err, c.waitErr))
		}
	case <-time.After(timeout):
		return fail(fmt.Errorf("container writer not ready after %v", timeout))
	}
	pid, err := containerWriterPid(cmd.Process.Pid)
	if err != nil {
		return fail(err)
	}
	c.hostPid = pid
	return c, nil
}

// containerWriterPid finds the writer under unshare: unshare → sh (pid 1
// inside) → writer, and checks it is in a pid namespace of its own.
func containerWriterPid(unsharePid int) (int, error) {
	kids, err := childPids(unsharePid)
	if err != nil || len(kids) != 1 {
		return 0, fmt.Errorf("container init under unshare %d: %v %v", unsharePid, kids, err)
	}
	kids2, err := childPids(kids[0])
	if err != nil || len(kids2) != 1 {
		return 0, fmt.Errorf("container writer under its init %d: %v %v", kids[0], kids2, err)
	}
	ns, err := nsPids(kids2[0])
	if err != nil {
		return 0, err
	}
	if len(ns) < 2 {
		return 0, fmt.Errorf("container writer %d is not in a pid namespace of its own (NSpid %v)", kids2[0], ns)
	}
	return kids2[0], nil
}

// Done is closed when unshare (and so the container) has exited.
func (c *containerProc) Done() <-chan struct{} { return c.done }

// Exited reports whether the container has exited, and unshare's wait
// error (whose status is the writer's).
func (c *containerProc) Exited() (bool, error) {
	select {
	case <-c.done:
		return true, c.waitErr
	default:
		return false, nil
	}
}

// Stop ends the writer cleanly: SIGTERM and SIGCONT to the writer itself
// (unshare ignores SIGTERM while it waits), then waits for the container.
func (c *containerProc) Stop(timeout time.Duration) error {
	if c.hostPid != 0 {
		_ = syscall.Kill(c.hostPid, syscall.SIGTERM)
		_ = syscall.Kill(c.hostPid, syscall.SIGCONT)
	}
	select {
	case <-c.done:
		var ee *exec.ExitError
		if c.waitErr != nil && !errors.As(c.waitErr, &ee) {
			return c.waitErr
		}
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("container writer %d did not exit %v after SIGTERM", c.hostPid, timeout)
	}
}

// Kill ends the container: SIGKILL to the writer, then to unshare, whose
// --kill-child takes the namespace down with it.
func (c *containerProc) Kill() {
	select {
	case <-c.done:
		return
	default:
	}
	if c.hostPid != 0 {
		_ = syscall.Kill(c.hostPid, syscall.SIGKILL)
	}
	_ = c.cmd.Process.Kill()
}

// containerExitReason reads the writer's end from unshare's status: the
// container's sh exits 128+n when the writer died of signal n.
func containerExitReason(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Exited() && ws.ExitStatus() > 128 {
			return unix2name(syscall.Signal(ws.ExitStatus() - 128))
		}
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Exited() && ws.ExitStatus() == 97 {
			return "container bind mount failed"
		}
	}
	return exitReason(err)
}

// probeContainers says why containers cannot run here ("" when they can):
// root, unshare, and a mount + pid namespace that really starts.
func probeContainers(ctx context.Context) string {
	if os.Geteuid() != 0 {
		return "needs root (unshare --mount --pid)"
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return "unshare (util-linux) not installed"
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, unshare, "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private", "true").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("unshare --mount --pid --fork failed: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return ""
}
