package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/internal/hermestest"
)

var (
	agentdOnce sync.Once
	agentdPath string
	agentdErr  error
)

// agentdBinary builds agentd once per test process: the service tests
// run the real program, as systemd would.
func agentdBinary(t *testing.T) string {
	t.Helper()
	agentdOnce.Do(func() {
		dir, err := hermestest.BuildDir("agentd")
		if err != nil {
			agentdErr = err
			return
		}
		agentdPath = filepath.Join(dir, "agentd")
		out, err := exec.Command("go", "build", "-o", agentdPath, ".").CombinedOutput()
		if err != nil {
			agentdErr = fmt.Errorf("build agentd: %v\n%s", err, out)
		}
	})
	if agentdErr != nil {
		t.Fatal(agentdErr)
	}
	return agentdPath
}

// agentdProc is one `agentd run` child process.
type agentdProc struct {
	cmd    *exec.Cmd
	stderr *os.File // its log, when not the journal
	done   chan struct{}
	err    error
}

// agentdRig is an isolated agentd configuration: a Hermes home of its own,
// no passwd discovery, state and socket in temporary directories.
type agentdRig struct {
	home     string // the Hermes home
	dir      string
	config   string
	stateDir string
	socket   string
}

func newAgentdRig(t *testing.T, extra string) *agentdRig {
	t.Helper()
	dir := t.TempDir()
	// Unix socket paths are limited to 108 bytes; t.TempDir can be long.
	sockDir, err := os.MkdirTemp("", "sg-svc2-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	r := &agentdRig{
		home: filepath.Join(dir, "hermes"), dir: dir, config: filepath.Join(dir, "agent.toml"),
		stateDir: filepath.Join(dir, "state"), socket: filepath.Join(sockDir, "agent.sock"),
	}
	if err := os.MkdirAll(r.home, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("state_dir = %q\nsocket = %q\nreconcile = \"200ms\"\ndiscover_users = false\nhomes = [%q]\n[log]\nlevel = \"debug\"\n%s",
		r.stateDir, r.socket, r.home, extra)
	if err := os.WriteFile(r.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

// start runs `agentd run --config` with env added to a minimal
// environment (HOME in the rig, so no real ~/.hermes is found). Its
// stderr goes to a file, shown when the test fails.
func (r *agentdRig) start(t *testing.T, env ...string) *agentdProc {
	t.Helper()
	return r.startCmd(t, exec.Command(agentdBinary(t), "run", "--config", r.config), env...)
}

func (r *agentdRig) startCmd(t *testing.T, cmd *exec.Cmd, env ...string) *agentdProc {
	t.Helper()
	stderr, err := os.CreateTemp(r.dir, "agentd-stderr-")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = []string{"HOME=" + r.dir, "PATH=" + os.Getenv("PATH")}
	for _, e := range env {
		if e == journalStreamOfStderr {
			e = "JOURNAL_STREAM=" + streamOf(t, stderr)
		}
		cmd.Env = append(cmd.Env, e)
	}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	dieWithTest(cmd.SysProcAttr)
	p := &agentdProc{cmd: cmd, stderr: stderr, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal follows the thread that forked agentd:
		// this goroutine keeps that thread until agentd has exited, so an
		// agentd dies with a test binary that no cleanup ran in (a
		// -timeout exit, a kill from outside), as the writers do
		// (hermestest.SpawnWriter).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err != nil {
			return
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			b, _ := os.ReadFile(stderr.Name())
			t.Logf("agentd stderr:\n%s", b)
		}
		stderr.Close()
	})
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *agentdProc) stop(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("agentd did not stop within 60 s of SIGTERM")
	}
}

func (p *agentdProc) log() string {
	b, _ := os.ReadFile(p.stderr.Name())
	return string(b)
}

// logHas reports whether the agent's stderr log has a line with every part.
func (p *agentdProc) logHas(parts ...string) bool { return len(p.logLines(parts...)) > 0 }

// logLines returns the agent's stderr log lines that have every part.
func (p *agentdProc) logLines(parts ...string) []string {
	var out []string
	for _, line := range strings.Split(p.log(), "\n") {
		ok := true
		for _, s := range parts {
			ok = ok && strings.Contains(line, s)
		}
		if ok && line != "" {
			out = append(out, line)
		}
	}
	return out
}

// sandboxScript emulates what ProtectSystem=strict with ReadWritePaths=
// does to agentd, restricted to one directory tree: in a private mount
// namespace, root is bind-mounted read-only onto itself, then each
// writable path inside it is bind-mounted read-write onto itself, and
// agentd is exec'd (same pid as the unshare child). $1 is root, then the
// writable paths, "--", the command.
const sandboxScript = `set -e
root=$1; shift
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
while [ "$1" != "--" ]; do
	mount --bind "$1" "$1"
	mount -o remount,bind,rw "$1"
	shift
done
shift
exec "$@"
`

// startSandboxed runs agentd as start does, inside the sandbox: root
// read-only but for rw (paths outside root are left alone, a missing
// one is skipped like a "-" entry).
func (r *agentdRig) startSandboxed(t *testing.T, root string, rw []string, env ...string) *agentdProc {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare (util-linux) is not installed")
	}
	if os.Geteuid() != 0 {
		t.Skip("mount namespaces with bind mounts need root")
	}
	args := []string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", sandboxScript, "sh", root}
	for _, p := range rw {
		p = strings.TrimPrefix(p, "-")
		if _, err := os.Stat(p); err == nil && strings.HasPrefix(p+"/", root+"/") {
			args = append(args, p)
		}
	}
	args = append(args, "--", agentdBinary(t), "run", "--config", r.config)
	return r.startCmd(t, exec.Command(unshare, args...), env...)
}

// waitLog polls the agent's log until a line has every part, or the
// deadline passes; it returns that line.
func (p *agentdProc) waitLog(t *testing.T, timeout time.Duration, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, line := range strings.Split(p.log(), "\n") {
			ok := line != ""
			for _, s := range parts {
				ok = ok && strings.Contains(line, s)
			}
			if ok {
				return line
			}
		}
		select {
		case <-p.done:
			t.Fatalf("agentd exited (%v) before logging %q", p.err, parts)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q within %v", parts, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var (
	agentctlOnce sync.Once
	agentctlPath string
	agentctlErr  error
)

func agentctlBinary(t *testing.T) string {
	t.Helper()
	agentctlOnce.Do(func() {
		dir, err := hermestest.BuildDir("agentctl")
		if err != nil {
			agentctlErr = err
			return
		}
		agentctlPath = filepath.Join(dir, "agentctl")
		out, err := exec.Command("go", "build", "-o", agentctlPath, "github.com/stateguard/stateguard/cmd/agentctl").CombinedOutput()
		if err != nil {
			agentctlErr = fmt.Errorf("build agentctl: %v\n%s", err, out)
		}
	})
	if agentctlErr != nil {
		t.Fatal(agentctlErr)
	}
	return agentctlPath
}

// journalStreamOfStderr, given to start, sets $JOURNAL_STREAM to the
// device and inode of agentd's stderr, as systemd does for a service
// whose output goes to the journal.
const journalStreamOfStderr = "JOURNAL_STREAM=<stderr>"

func streamOf(t *testing.T, f *os.File) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return strconv.FormatUint(uint64(st.Dev), 10) + ":" + strconv.FormatUint(st.Ino, 10)
}
