package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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
	// container, when set, runs the writer in its own mount and pid
	// namespaces with the profile directory bind-mounted here.
	container string
	unshare   string

	mu      sync.Mutex
	cur     writerProc
	curPid  int // the running writer's host pid
	started time.Time
	exits   map[string]int // why writers ended: SIGTERM, SIGKILL, exit 1, spawn failed
	spawns  int
	history []procLife // every writer process this slot ran
}

// writerProc is a running writer: the test writer itself
// (*hermestest.Writer) or one in a container (*containerProc).
type writerProc interface {
	Done() <-chan struct{}
	Exited() (bool, error)
	Stop(timeout time.Duration) error
	Kill()
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

// newContainerSlot is a writer slot whose writers run in a container of
// their own (container.go) with p's directory as the volume at
// <root>/containers/<name>/data, an empty directory on the host.
func newContainerSlot(e *env, p *profile, i int, rate float64, log *slog.Logger, restart func() time.Duration, unshare string) (*writerSlot, error) {
	s, err := newWriterSlot(e, p, i, rate, log, restart)
	if err != nil {
		return nil, err
	}
	s.name += "-ct"
	s.log = log.With("writer", s.name)
	s.opts.Session = s.name
	s.opts.Ack = filepath.Join(e.acks, s.name+".ack")
	s.container = filepath.Join(e.root, "containers", s.name, "data")
	if err := os.MkdirAll(s.container, 0o700); err != nil {
		return nil, fmt.Errorf("create container volume %s: %w", s.container, err)
	}
	s.opts.DB = filepath.Join(s.container, filepath.Base(p.db))
	s.unshare = unshare
	return s, nil
}

// spawn starts one writer process and returns it with its host pid.
func (s *writerSlot) spawn() (writerProc, int, error) {
	if s.container != "" {
		c, err := spawnContainerWriter(s.unshare, s.bin, s.opts, s.p.dir, s.container, 30*time.Second)
		if err != nil {
			return nil, 0, err
		}
		return c, c.hostPid, nil
	}
	w, err := hermestest.SpawnWriter(s.bin, s.opts, 30*time.Second)
	if err != nil {
		return nil, 0, err
	}
	return w, w.Pid, nil
}

func (s *writerSlot) exitReason(err error) string {
	if s.container != "" {
		return containerExitReason(err)
	}
	return exitReason(err)
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
		w, pid, err := s.spawn()
		s.mu.Lock()
		s.spawns++
		if err != nil {
			why := spawnFailure(err, s.logPath())
			s.exits["spawn failed ("+why+")"]++
			s.mu.Unlock()
			s.log.Debug("writer did not become ready", "err", err, "why", why)
			if sleepOrStop(stop, 500*time.Millisecond) {
				return
			}
			continue
		}
		s.cur, s.curPid, s.started = w, pid, time.Now()
		s.history = append(s.history, procLife{pid: pid, start: s.started})
		s.mu.Unlock()
		select {
		case <-w.Done():
		case <-stop:
			s.finalStop(w, pid)
			return
		}
		_, werr := w.Exited()
		why := s.exitReason(werr)
		s.mu.Lock()
		s.cur, s.curPid = nil, 0
		s.exits[why]++
		s.history[len(s.history)-1].end = time.Now()
		s.mu.Unlock()
		s.log.Debug("writer ended; restarting", "pid", pid, "why", why)
		if sleepOrStop(stop, s.restart()) {
			return
		}
	}
}

// finalStop ends the writer at the end of the run: SIGTERM, SIGCONT in
// case an incident still holds it (the run checked for that before), then
// SIGKILL if it does not go.
func (s *writerSlot) finalStop(w writerProc, pid int) {
	if err := w.Stop(15 * time.Second); err != nil {
		s.log.Warn("writer did not stop; killing", "pid", pid, "err", err)
		w.Kill()
		<-w.Done()
	}
	s.mu.Lock()
	s.cur, s.curPid = nil, 0
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
	return s.curPid
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

// logPath is the file the slot's writers write their stderr to.
func (s *writerSlot) logPath() string {
	if f, ok := s.opts.Stderr.(*os.File); ok {
		return f.Name()
	}
	return ""
}

// spawnFailure says why a writer never acknowledged its first row, for the
// report: a writer that exits before its first commit says why on its
// stderr (the last line of its log: a store it cannot write, such as a
// corrupt one every restarted writer fails on again), one that never got
// that far in the spawn timeout was stopped or stuck (frozen by an
// incident at spawn, or a lock it waited on).
func spawnFailure(err error, logPath string) string {
	if strings.Contains(err.Error(), "not ready after") {
		return "no first commit in the spawn timeout"
	}
	line := lastLine(logPath)
	if line == "" {
		return "exited before its first commit, nothing on stderr"
	}
	// One key per cause, not per row or blob: "append seq 6951: database
	// disk image is malformed: fts5: corruption found reading blob ...
	// (267)" is "database disk image is malformed".
	line = strings.TrimPrefix(line, "writer: ")
	line = appendSeq.ReplaceAllString(line, "")
	if i := strings.Index(line, " malformed"); i >= 0 {
		line = line[:i+len(" malformed")]
	}
	return strings.TrimSpace(sqliteCode.ReplaceAllString(line, ""))
}

var (
	appendSeq  = regexp.MustCompile(`^append seq [0-9]+: `)
	sqliteCode = regexp.MustCompile(` \([0-9]+\)$`)
)

// lastLine is the last non-empty line of the file at path, read from its
// tail (a writer log grows by a line per failed start).
func lastLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 4096
	buf := make([]byte, tail)
	off := int64(0)
	if st, err := f.Stat(); err == nil && st.Size() > tail {
		off = st.Size() - tail
	}
	n, _ := f.ReadAt(buf, off)
	lines := strings.Split(strings.TrimRight(string(buf[:n]), "\n"), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
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
