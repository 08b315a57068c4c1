package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
		dir, err := os.MkdirTemp("", "stateguard-agentd-")
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
	stderr, err := os.CreateTemp(r.dir, "agentd-stderr-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(agentdBinary(t), "run", "--config", r.config)
	cmd.Env = append([]string{"HOME=" + r.dir, "PATH=" + os.Getenv("PATH")}, env...)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &agentdProc{cmd: cmd, stderr: stderr, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
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
func (p *agentdProc) logHas(parts ...string) bool {
	for _, line := range strings.Split(p.log(), "\n") {
		ok := true
		for _, s := range parts {
			ok = ok && strings.Contains(line, s)
		}
		if ok && line != "" {
			return true
		}
	}
	return false
}
