package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/sdnotify"
	"github.com/stateguard/stateguard/internal/sdnotify/sdnotifytest"
)

// fakeProber answers as told: healthy, an error, or not at all (it
// ignores its context, as a wedged part would).
type fakeProber struct {
	mu      sync.Mutex
	err     error
	hang    chan struct{} // non-nil: Alive blocks until it is closed
	started atomic.Int32
}

func (f *fakeProber) Alive(ctx context.Context) error {
	f.started.Add(1)
	f.mu.Lock()
	err, hang := f.err, f.hang
	f.mu.Unlock()
	if hang != nil {
		<-hang
	}
	return err
}

func (f *fakeProber) Summary() string { return "2 stores watched, 0 incidents open, 0 replays queued" }

func (f *fakeProber) set(err error, hang chan struct{}) {
	f.mu.Lock()
	f.err, f.hang = err, hang
	f.mu.Unlock()
}

func newTestKeepalive(t *testing.T, p prober, log *syncWriter) (*keepalive, *sdnotifytest.Socket) {
	sock := sdnotifytest.Listen(t, false)
	n, err := sdnotify.New(sock.Addr)
	if err != nil {
		t.Fatal(err)
	}
	l := slog.New(slog.NewJSONHandler(log, nil))
	return &keepalive{
		notify: &serviceNotify{n: n, log: l}, probe: p, log: l,
		period: 100 * time.Millisecond, deadline: 50 * time.Millisecond, watchdog: true,
		exit: func(int) { t.Error("exit called") }, now: time.Now,
	}, sock
}

type syncWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func waitMsg(t *testing.T, sock *sdnotifytest.Socket, ok func(sdnotifytest.Message) bool) sdnotifytest.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := sock.WaitFor(ctx, ok)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestKeepaliveFollowsTheProbe: keepalives while the probe answers, none
// while it fails or hangs (with STATUS saying why, and one log record per
// cause), and again once it answers.
func TestKeepaliveFollowsTheProbe(t *testing.T) {
	p := &fakeProber{}
	log := &syncWriter{b: &bytes.Buffer{}}
	k, sock := newTestKeepalive(t, p, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.run(ctx); close(done) }()
	defer cancel()

	m := waitMsg(t, sock, func(m sdnotifytest.Message) bool { return has(m, "WATCHDOG", "1") })
	if s, _ := m.Get("STATUS"); !strings.Contains(s, "2 stores watched") {
		t.Errorf("keepalive without the counts: %q", m.Lines)
	}

	p.set(errors.New("store /h/state.db: worker does not answer"), nil)
	waitMsg(t, sock, func(m sdnotifytest.Message) bool {
		s, _ := m.Get("STATUS")
		return strings.HasPrefix(s, "unhealthy: store /h/state.db")
	})
	// From here on, until the probe answers again: no keepalive at all.
	n := len(sock.All())
	hang := make(chan struct{})
	p.set(nil, hang)
	waitMsg(t, sock, func(m sdnotifytest.Message) bool {
		s, _ := m.Get("STATUS")
		return strings.Contains(s, "probe itself is stuck")
	})
	for _, m := range sock.All()[n:] {
		if has(m, "WATCHDOG", "1") {
			t.Fatalf("a keepalive went out while the probe failed or hung: %q", m.Lines)
		}
	}
	startedWhileStuck := p.started.Load()
	waitMsg(t, sock, func(m sdnotifytest.Message) bool {
		s, _ := m.Get("STATUS")
		return strings.Contains(s, "probe itself is stuck")
	})
	if p.started.Load() != startedWhileStuck {
		t.Errorf("a second probe started while the first was stuck")
	}
	close(hang)
	waitMsg(t, sock, func(m sdnotifytest.Message) bool { return has(m, "WATCHDOG", "1") })

	cancel()
	<-done
	out := log.String()
	if c := strings.Count(out, `"event":"agent.unhealthy"`); c < 2 || c > 3 {
		t.Errorf("%d agent.unhealthy records for two causes:\n%s", c, out)
	}
	if !strings.Contains(out, `"event":"agent.healthy"`) {
		t.Errorf("no agent.healthy record:\n%s", out)
	}
}

// TestKeepaliveSelfExit: with exitAfter (launchd), an agent unhealthy that
// long writes every goroutine's stack and exits 70.
func TestKeepaliveSelfExit(t *testing.T) {
	p := &fakeProber{err: errors.New("event loop does not answer")}
	var stacks bytes.Buffer
	k, _ := newTestKeepalive(t, p, &syncWriter{b: &bytes.Buffer{}})
	k.watchdog, k.exitAfter, k.stacks = false, 50*time.Millisecond, &stacks
	code := make(chan int, 1)
	k.exit = func(c int) { code <- c }
	start := time.Now()
	k.run(context.Background())
	select {
	case c := <-code:
		if c != exitUnhealthy {
			t.Errorf("exit %d, want %d", c, exitUnhealthy)
		}
	default:
		t.Fatal("run returned without exiting")
	}
	if time.Since(start) < k.exitAfter {
		t.Errorf("exited after %v, before exitAfter %v", time.Since(start), k.exitAfter)
	}
	if !strings.Contains(stacks.String(), "goroutine") || !strings.Contains(stacks.String(), "TestKeepaliveSelfExit") {
		t.Errorf("no goroutine dump: %q", stacks.String())
	}
}

func TestKeepaliveTiming(t *testing.T) {
	if p, d := keepaliveTiming(30 * time.Second); p != 10*time.Second || d != 5*time.Second {
		t.Errorf("keepaliveTiming(30s) = %v, %v", p, d)
	}
}

// has reports whether an sd_notify message carries key=val.
func has(m sdnotifytest.Message, key, val string) bool {
	v, ok := m.Get(key)
	return ok && v == val
}
