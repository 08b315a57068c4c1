package main

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/journal"
)

func TestSocketPath(t *testing.T) {
	env := map[string]string{socketEnv: "/env/agent.sock", "XDG_RUNTIME_DIR": "/run/user/1000", "HOME": "/home/u"}
	get := func(k string) string { return env[k] }
	if got := socketPath("/flag.sock", get); got != "/flag.sock" {
		t.Errorf("--socket: %s", got)
	}
	if got := socketPath("", get); got != "/env/agent.sock" {
		t.Errorf("$%s: %s", socketEnv, got)
	}
	delete(env, socketEnv)
	want := filepath.Join(control.DefaultRuntimeDir(get, os.Geteuid()), control.SocketFile)
	if got := socketPath("", get); got != want {
		t.Errorf("default: %s, want %s", got, want)
	}
}

// A missing socket and a stale one (a file nobody accepts on, as a killed
// agent leaves) both mean "daemon not running"; the client never hangs.
func TestClientDaemonNotRunning(t *testing.T) {
	dir, err := os.MkdirTemp("", "sg-cl-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	missing := filepath.Join(dir, "missing.sock")
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Lstat(stale); err != nil {
		t.Fatalf("stale socket file: %v", err)
	}
	notDir := filepath.Join(dir, "file")
	os.WriteFile(notDir, nil, 0o600)
	for _, sock := range []string{missing, stale, filepath.Join(notDir, "agent.sock"), ""} {
		var v any
		err := newClient(sock).get(context.Background(), "/v1/status", &v)
		var nr *notRunningError
		if !errors.Is(err, errDaemonNotRunning) || !errors.As(err, &nr) || nr.Socket != sock {
			t.Errorf("%q: %v, want daemon not running", sock, err)
		}
		if !strings.HasPrefix(err.Error(), "daemon not running") {
			t.Errorf("%q: message %q", sock, err)
		}
	}
}

// Verbs that need agentd say so when it does not run and no journal
// stands in.
func TestVerbsWithoutDaemon(t *testing.T) {
	vars := noDaemon(t)
	empty := t.TempDir()
	for _, args := range [][]string{
		{"incidents", "--state-dir", empty},
		{"incidents", "--all", "--json", "--state-dir", empty},
		{"incident", "show", "X", "--state-dir", empty},
		{"queue", "--state-dir", empty},
		{"release", "X", "--terminate"},
	} {
		r := ctl(t, vars, args...)
		if r.code != exitError || !strings.Contains(r.stderr, "daemon not running") || r.stdout != "" {
			t.Errorf("%v: exit %d stdout %q stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	// A database that is not a journal is refused, not read or changed.
	bogus := t.TempDir()
	os.WriteFile(filepath.Join(bogus, journal.FileName), []byte("not sqlite at all, just text padding it out......................................................................"), 0o600)
	r := ctl(t, vars, "incidents", "--state-dir", bogus)
	if r.code != exitError || !strings.Contains(r.stderr, "daemon not running") {
		t.Errorf("bogus journal: exit %d %q", r.code, r.stderr)
	}
	for _, args := range [][]string{{"incident"}, {"incident", "list"}, {"incident", "show"}, {"incident", "show", "a", "b"}, {"queue", "x"}, {"incidents", "--bogus"}} {
		if r := ctl(t, vars, args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want usage", args, r.code)
		}
	}
}
