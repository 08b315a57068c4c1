package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// writerSlot is one Hermes-like writer, one session, one ack file, kept
// running by its own loop the way a service manager keeps a gateway up.
type writerSlot struct {
	name    string
	p       *profile
	opts    hermestest.WriterOptions
	bin     string
	log     *slog.Logger
	restart func() time.Duration // delay before a restart

	mu      sync.Mutex
	cur     *hermestest.Writer
	started time.Time
	exits   map[string]int // why writers ended: SIGTERM, SIGKILL, exit 1, spawn failed
	spawns  int
	history []procLife // every writer process this slot ran
}

func newWriterSlot(e *env, p *profile, i int, rate float64, log *slog.Logger, restart func() time.Duration) (*writerSlot, error) {
	name := fmt.Sprintf("w%d-%s", i, p.name)
	lf, err := os.OpenFile(filepath.Join(e.logs, name+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open writer log: %w", err)
	}
	o := hermestest.WriterOptions{DB: p.db, Session: name, Rate: rate, Ack: filepath.Join(e.acks, name+".ack"),
		Create: true, ToolEvery: 7, Stderr: lf}
	if p.canceller {
		o.CancelLocksEvery = 3
	}
	return &writerSlot{name: name, p: p, opts: o, bin: e.writer, log: log.With("writer", name), restart: restart,
		exits: map[string]int{}}, nil
}

// loop keeps the writer running until stop is closed, then stops it.
func (s *writerSlot) loop(stop <-chan struct{}) {
	defer s.opts.Stderr.(*os.File).Close()
	for {
		select {
		case <-stop:
			return
		default:
		}
		w, err := hermestest.SpawnWriter(s.bin, s.opts, 30*time.Second)
		s.mu.Lock()
		s.spawns++
		if err != nil {
			s.exits["spawn failed"]++
			s.mu.Unlock()
			s.log.Debug("writer did not become ready", "err", err)
			if sleepOrStop(stop, 500*time.Millisecond) {
				return
			}
			continue
		}
		s.cur, s.started = w, time.Now()
		s.history = append(s.history, procLife{pid: w.Pid, start: s.started})
		s.mu.Unlock()
		select {
		case <-w.Done():
		case <-stop:
			s.finalStop(w)
			return
		}
		_, werr := w.Exited()
		why := exitReason(werr)
		s.mu.Lock()
		s.cur = nil
		s.exits[why]++
		s.history[len(s.history)-1].end = time.Now()
		s.mu.Unlock()
		s.log.Debug("writer ended; restarting", "pid", w.Pid, "why", why)
		if sleepOrStop(stop, s.restart()) {
			return
		}
	}
}

// finalStop ends the writer at the end of the run: SIGTERM, SIGCONT in
// case an incident still holds it (the run checked for that before), then
// SIGKILL if it does not go.
func (s *writerSlot) finalStop(w *hermestest.Writer) {
	if err := w.Stop(15 * time.Second); err != nil {
		s.log.Warn("writer did not stop; killing", "pid", w.Pid, "err", err)
		w.Kill()
		<-w.Done()
	}
	s.mu.Lock()
	s.cur = nil
	s.history[len(s.history)-1].end = time.Now()
	s.mu.Unlock()
}

// procLife is one writer process: its pid and when it ran (end is when
// its exit was seen).
type procLife struct {
	pid        int
	start, end time.Time
}

// lifeOf finds the writer process pid that ran at t.
func (s *writerSlot) lifeOf(pid int, t time.Time) (procLife, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.history {
		if l.pid == pid && !t.Before(l.start) && (l.end.IsZero() || !t.After(l.end)) {
			return l, true
		}
	}
	return procLife{}, false
}

// pid is the running writer's pid, 0 when none runs.
func (s *writerSlot) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return 0
	}
	if done, _ := s.cur.Exited(); done {
		return 0
	}
	return s.cur.Pid
}

func (s *writerSlot) startedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// acksSince is how many acks the current writer wrote since it started,
// counted from the ack file (cheap enough for the few calls a fault makes).
func (s *writerSlot) acksSince(t time.Time) int {
	acks, err := hermestest.ReadAcks(s.opts.Ack)
	if err != nil {
		return 0
	}
	n := 0
	for _, a := range acks {
		if a.Timestamp >= float64(t.UnixNano())/1e9 {
			n++
		}
	}
	return n
}

func exitReason(err error) string {
	if err == nil {
		return "exit 0 (SIGTERM handled)"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			if ws.Signaled() {
				return unix2name(ws.Signal())
			}
			return fmt.Sprintf("exit %d", ws.ExitStatus())
		}
	}
	return err.Error()
}

func unix2name(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	}
	return s.String()
}

// sleepOrStop waits d and reports whether stop closed meanwhile.
func sleepOrStop(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return true
	case <-t.C:
		return false
	}
}

// between is a uniformly random duration in [lo, hi) scaled by pace.
func between(rng *rand.Rand, mu *sync.Mutex, lo, hi time.Duration, pace float64) time.Duration {
	mu.Lock()
	d := lo + time.Duration(rng.Int64N(int64(hi-lo)))
	mu.Unlock()
	return time.Duration(float64(d) * pace)
}
