package supervisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/internal/hermestest"
)

const lockHelperEnv = "STATEGUARD_TEST_LOCK_HELPER"

// TestLockHelper is not a test: run with lockHelperEnv set, it is the
// second process of the lock tests. It takes the lock, reports "locked" or
// the error on stdout, and holds the lock until stdin closes.
func TestLockHelper(t *testing.T) {
	dir := os.Getenv(lockHelperEnv)
	if dir == "" {
		t.Skip("helper process for the lock tests")
	}
	l, err := AcquireLock(dir)
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(0)
	}
	fmt.Println("locked")
	io.Copy(io.Discard, os.Stdin)
	l.Release()
	os.Exit(0)
}

type lockHelper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	line  string
}

// startLockHelper starts the helper and waits for its first line.
func startLockHelper(t *testing.T, dir string) *lockHelper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelper$")
	cmd.Env = append(os.Environ(), lockHelperEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, stdout := hermestest.StartPiped(t, cmd)
	t.Cleanup(func() { cmd.Process.Kill() })
	h := &lockHelper{cmd: cmd, stdin: stdin}
	h.line = hermestest.FirstLine(t, "lock helper", stdout, 30*time.Second)
	return h
}

func TestAcquireLockAcrossProcesses(t *testing.T) {
	dir := t.TempDir()

	h := startLockHelper(t, dir)
	if h.line != "locked" {
		t.Fatalf("helper: %q", h.line)
	}
	_, err := AcquireLock(dir)
	if !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("AcquireLock while another process holds it = %v, want ErrAlreadyRunning", err)
	}
	if want := "pid " + strconv.Itoa(h.cmd.Process.Pid); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the holder (%s)", err, want)
	}

	// A holder that dies without releasing (kill -9) loses the lock.
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.cmd.Wait()
	l, err := AcquireLock(dir)
	if err != nil {
		t.Fatalf("AcquireLock after the holder was killed: %v", err)
	}

	// And the other way round: this process holds it, a second one is refused.
	h2 := startLockHelper(t, dir)
	want := "pid " + strconv.Itoa(os.Getpid())
	if !strings.HasPrefix(h2.line, "error ") || !strings.Contains(h2.line, want) {
		t.Errorf("second process got %q, want an error naming %s", h2.line, want)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	h3 := startLockHelper(t, dir)
	if h3.line != "locked" {
		t.Errorf("after Release, helper got %q", h3.line)
	}
}

func TestAcquireLockSameProcess(t *testing.T) {
	dir := t.TempDir()
	l, err := AcquireLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(l.Path()); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q (%v), want our pid", b, err)
	}
	if fi, err := os.Stat(l.Path()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("lock file mode %v (%v), want 0600", fi.Mode(), err)
	}
	if _, err := AcquireLock(dir); !errors.Is(err, ErrAlreadyRunning) {
		t.Errorf("second AcquireLock in the same process = %v, want ErrAlreadyRunning", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
	l2, err := AcquireLock(dir)
	if err != nil {
		t.Fatalf("AcquireLock after Release: %v", err)
	}
	l2.Release()
}

func TestAcquireLockRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := dir + "/elsewhere"
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, dir+"/"+control.LockFile); err != nil {
		t.Fatal(err)
	}
	if l, err := AcquireLock(dir); err == nil {
		l.Release()
		t.Fatal("AcquireLock followed a symlinked agent.lock")
	}
}
