package hermestest

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// AgentEnv is what an agentd run inside a test needs around it, short of
// the supervisor's own options (this package imports nothing of
// stateguard, so every package's tests can use it).
type AgentEnv struct {
	Home     string // the Hermes home the agent watches
	StateDir string // a fresh state directory
	// Socket is a control socket path under a short temp directory: unix
	// socket paths are limited to 108 bytes, t.TempDir()'s are long.
	Socket string
	// Logger sends the agent's log to tb.Log until the test ends, so a
	// failure shows every event the agent emitted.
	Logger *slog.Logger
}

// NewAgentEnv prepares an AgentEnv for home; everything it creates is
// removed when tb ends.
func NewAgentEnv(tb testing.TB, home string) AgentEnv {
	tb.Helper()
	sock, err := os.MkdirTemp("", "sg-sock-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(sock) })
	return AgentEnv{
		Home:     home,
		StateDir: filepath.Join(tb.TempDir(), "state"),
		Socket:   filepath.Join(sock, "agent.sock"),
		Logger:   TestLogger(tb),
	}
}

// Getenv is the environment the agent's discovery sees: HERMES_HOME only.
func (e AgentEnv) Getenv(k string) string {
	if k == "HERMES_HOME" {
		return e.Home
	}
	return ""
}

// TestLogger logs text at debug level to tb.Log, and drops records once
// tb has ended (a goroutine of the agent may still log during cleanup).
func TestLogger(tb testing.TB) *slog.Logger {
	lw := &testLogWriter{tb: tb, on: true}
	tb.Cleanup(func() { lw.mu.Lock(); lw.on = false; lw.mu.Unlock() })
	return slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testLogWriter struct {
	mu sync.Mutex
	tb testing.TB
	on bool
}

func (w *testLogWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.on {
		w.tb.Log(strings.TrimRight(string(b), "\n"))
	}
	return len(b), nil
}
