package hermestest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
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
)

// MessageContent is the content the test writer gives message seq of
// session, so a test can find every acknowledged row by content.
func MessageContent(session string, seq int64) string {
	return fmt.Sprintf("msg %s #%d", session, seq)
}

// WriterOptions are the test writer's flags.
type WriterOptions struct {
	DB              string  // state.db path (required)
	Session         string  // default "s1"
	Source          string  // sessions.source for a created session; default "cli"
	Rate            float64 // messages per second; 0 = as fast as it can
	Count           int     // stop after this many; 0 = until signalled
	Ack             string  // ack file; default <DB dir>/../ack-<session> via the caller's temp dir
	Create          bool    // create the schema if missing
	CheckpointEvery int     // default 50 (Hermes); -1 disables
	// AutoCheckpoint is SQLite's wal_autocheckpoint, in pages: 0 keeps
	// SQLite's 1000, -1 turns it off (with CheckpointEvery -1, nothing
	// of the WAL reaches the main).
	AutoCheckpoint   int
	CancelLocksEvery int  // open+close state.db every N commits; 0 never
	Linger           bool // keep the connection open after Count
	ToolEvery        int  // every Nth message is a tool call + result
	NonDumpable      bool // prctl(PR_SET_DUMPABLE, 0): its fds unreadable even by its own user (Linux)
	// HermesGuards: Hermes' own guards (refuse, divert, capture at halt
	// and close; writer/hermes_guard.go). Diverted messages are acked
	// with ID -1.
	HermesGuards bool
	CapturePause bool // with HermesGuards: stop inside the capture, .partial left
	// Redivert: with HermesGuards, the last N committed messages are
	// diverted too at the first refusal (their rows are in both trails).
	Redivert   int
	Credential *syscall.Credential
	Stderr     io.Writer
}

// Writer is a running test writer process.
type Writer struct {
	Cmd     *exec.Cmd
	Pid     int
	AckPath string

	done    chan struct{}
	waitErr error
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// WriterBinary builds the writer once per process and returns its path,
// in a BuildDir: the package's TestMain must be Main or RunWithOFDLocks.
func WriterBinary() (string, error) {
	buildOnce.Do(func() {
		dir, err := BuildDir("writer")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "writer")
		buildErr = BuildWriter(buildPath)
	})
	return buildPath, buildErr
}

// BuildWriter compiles the writer program to out.
func BuildWriter(out string) error {
	cmd := exec.Command("go", "build", "-o", out, "github.com/stateguard/stateguard/internal/hermestest/writer")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build test writer: %v\n%s", err, b)
	}
	return nil
}

// Args renders o as the writer's command line flags.
func (o WriterOptions) Args() []string {
	args := []string{"-db", o.DB}
	if o.Session != "" {
		args = append(args, "-session", o.Session)
	}
	if o.Source != "" {
		args = append(args, "-source", o.Source)
	}
	if o.Rate > 0 {
		args = append(args, "-rate", strconv.FormatFloat(o.Rate, 'f', -1, 64))
	}
	if o.Count > 0 {
		args = append(args, "-count", strconv.Itoa(o.Count))
	}
	if o.Ack != "" {
		args = append(args, "-ack", o.Ack)
	}
	if o.Create {
		args = append(args, "-create")
	}
	switch {
	case o.CheckpointEvery < 0:
		args = append(args, "-checkpoint-every", "0")
	case o.CheckpointEvery > 0:
		args = append(args, "-checkpoint-every", strconv.Itoa(o.CheckpointEvery))
	}
	switch {
	case o.AutoCheckpoint < 0:
		args = append(args, "-autocheckpoint", "0")
	case o.AutoCheckpoint > 0:
		args = append(args, "-autocheckpoint", strconv.Itoa(o.AutoCheckpoint))
	}
	if o.CancelLocksEvery > 0 {
		args = append(args, "-cancel-locks-every", strconv.Itoa(o.CancelLocksEvery))
	}
	if o.Linger {
		args = append(args, "-linger")
	}
	if o.ToolEvery > 0 {
		args = append(args, "-tool-every", strconv.Itoa(o.ToolEvery))
	}
	if o.NonDumpable {
		args = append(args, "-nondumpable")
	}
	if o.HermesGuards {
		args = append(args, "-hermes-guards")
	}
	if o.CapturePause {
		args = append(args, "-hermes-capture-pause")
	}
	if o.Redivert > 0 {
		args = append(args, "-hermes-redivert", strconv.Itoa(o.Redivert))
	}
	return args
}

// SpawnWriter starts the writer binary bin and waits up to timeout for its
// first acknowledged commit ("ready" on stdout). It is the non-test form of
// StartWriter, for benchmarks and the chaos command.
func SpawnWriter(bin string, o WriterOptions, timeout time.Duration) (*Writer, error) {
	return spawn(exec.Command(bin, o.Args()...), o, timeout)
}

// spawn starts cmd, which runs the writer (directly, or under unshare),
// and waits for its ready line.
func spawn(cmd *exec.Cmd, o WriterOptions, timeout time.Duration) (*Writer, error) {
	cmd.Stderr = o.Stderr
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.Credential}
	dieWithParent(cmd.SysProcAttr)
	// An os.Pipe, not cmd.StdoutPipe: Wait (in its own goroutine below)
	// closes a StdoutPipe as soon as the process exits, and a writer
	// with a small Count can exit before "ready" is read.
	stdout, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = pw
	w := &Writer{Cmd: cmd, AckPath: o.Ack, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal (Linux) follows the thread that forked
		// the writer, not the process: this goroutine keeps that thread
		// until the writer has exited, so the writer dies with the test
		// binary (a -timeout exit, a SIGKILL from outside: no cleanup
		// runs then) and never because the runtime retired a thread.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err != nil {
			return
		}
		w.waitErr = cmd.Wait()
		close(w.done)
	}()
	err = <-started
	pw.Close()
	if err != nil {
		stdout.Close()
		return nil, fmt.Errorf("start writer: %w", err)
	}
	w.Pid = cmd.Process.Pid
	ready := make(chan error, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, err := r.ReadString('\n')
		if err != nil {
			ready <- fmt.Errorf("writer exited before ready: %w", err)
		} else if !strings.HasPrefix(line, "ready ") {
			ready <- fmt.Errorf("writer said %q, want ready", line)
		} else {
			ready <- nil
		}
		_, _ = io.Copy(io.Discard, r)
		stdout.Close()
	}()
	select {
	case err := <-ready:
		if err != nil {
			w.Kill()
			<-w.done
			return nil, fmt.Errorf("%w (wait: %v)", err, w.waitErr)
		}
		return w, nil
	case <-time.After(timeout):
		w.Kill()
		return nil, fmt.Errorf("writer not ready after %v", timeout)
	}
}

// StartWriter spawns the test writer for tb and kills it at cleanup. When
// o.Ack is empty an ack file in tb's temp dir is used.
func StartWriter(tb testing.TB, o WriterOptions) *Writer {
	tb.Helper()
	bin, err := WriterBinary()
	if err != nil {
		tb.Fatal(err)
	}
	if o.Ack == "" {
		o.Ack = filepath.Join(tb.TempDir(), "ack")
	}
	w, err := SpawnWriter(bin, o, 30*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		w.Kill()
		<-w.done
	})
	return w
}

// Done is closed when the writer process has exited.
func (w *Writer) Done() <-chan struct{} { return w.done }

// Exited reports whether the process has exited, and its wait error.
func (w *Writer) Exited() (bool, error) {
	select {
	case <-w.done:
		return true, w.waitErr
	default:
		return false, nil
	}
}

// Stop ends the writer cleanly (SIGTERM, then SIGCONT in case it is frozen)
// and waits up to timeout for it to exit.
func (w *Writer) Stop(timeout time.Duration) error {
	_ = w.Cmd.Process.Signal(syscall.SIGTERM)
	_ = w.Cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-w.done:
		var ee *exec.ExitError
		if w.waitErr != nil && !errors.As(w.waitErr, &ee) {
			return w.waitErr
		}
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("writer %d did not exit %v after SIGTERM", w.Pid, timeout)
	}
}

// Kill sends SIGKILL; it is safe on an exited writer.
func (w *Writer) Kill() {
	select {
	case <-w.done:
	default:
		_ = w.Cmd.Process.Kill()
	}
}

// Ack is one acknowledged message.
type Ack struct {
	Session   string
	Seq       int64
	Timestamp float64
	ID        int64
}

// ReadAcks parses an ack file. A torn last line (the writer was killed
// mid-write) is ignored: its message was never acknowledged to anyone.
func ReadAcks(path string) ([]Ack, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var acks []Ack
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasSuffix(line, "\n") {
			continue
		}
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("%s: bad ack line %q", path, line)
		}
		var a Ack
		a.Session = f[0]
		if a.Seq, err = strconv.ParseInt(f[1], 10, 64); err != nil {
			return nil, fmt.Errorf("%s: bad seq in %q", path, line)
		}
		if a.Timestamp, err = strconv.ParseFloat(f[2], 64); err != nil {
			return nil, fmt.Errorf("%s: bad timestamp in %q", path, line)
		}
		if a.ID, err = strconv.ParseInt(f[3], 10, 64); err != nil {
			return nil, fmt.Errorf("%s: bad id in %q", path, line)
		}
		acks = append(acks, a)
	}
	return acks, nil
}

// Acks reads the writer's ack file, failing tb on error.
func (w *Writer) Acks(tb testing.TB) []Ack {
	tb.Helper()
	acks, err := ReadAcks(w.AckPath)
	if err != nil {
		tb.Fatal(err)
	}
	return acks
}
