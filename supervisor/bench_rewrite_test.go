//go:build linux

package supervisor

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// foreignWriterEnv makes the test binary a foreign writer, an operator's
// in-place restore: it opens the store's main for writing, waits for a
// line on stdin, prints the CLOCK_MONOTONIC time and writes the main's
// header string back over itself (the first write, the one measured; no
// connection ever changes the header string). Then it waits for a second
// line, sent once every live writer is stopped, and writes the backup
// named by foreignBackupEnv over the main, cut to the backup's size. With
// foreignOpenEnv set it opens the main write-only only after the first
// line (the open a gate holds) and prints the time before its open(2) and
// the time it returned.
//
// The restore is what leaves the store whole. A live writer may be
// stopped in the middle of a checkpoint, with part of its WAL copied into
// the main; the incident then moves that WAL out of the path, and a main
// that only had its header written back is left half checkpointed:
// malformed, every replay into it failing (the first-write run that did
// not finish, an incident in replaying after 60 s). A restore replaces
// every page, as cp does. It begins only once the writers are stopped, so
// no page of a checkpoint in flight lands after the restore's.
const (
	foreignWriterEnv = "STATEGUARD_TEST_FOREIGN_WRITER"
	foreignOpenEnv   = "STATEGUARD_TEST_FOREIGN_OPEN"
	foreignBackupEnv = "STATEGUARD_TEST_FOREIGN_BACKUP"
)

func foreignWriterMain(path string) int {
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "foreign writer: %s: %v\n", what, err)
		return 1
	}
	backup, err := os.ReadFile(os.Getenv(foreignBackupEnv))
	if err != nil {
		return fail("backup", err)
	}
	if len(backup) < len(sqliteHeader) || string(backup[:len(sqliteHeader)]) != sqliteHeader {
		return fail("backup", fmt.Errorf("%s is no SQLite database", os.Getenv(foreignBackupEnv)))
	}
	openLate := os.Getenv(foreignOpenEnv) != ""
	var f *os.File
	if !openLate {
		if f, err = os.OpenFile(path, os.O_RDWR, 0); err != nil {
			return fail("open", err)
		}
	}
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return fail("stdin", err)
	}
	ts := monoNow()
	if openLate {
		if f, err = os.OpenFile(path, os.O_WRONLY, 0); err != nil {
			return fail("open", err)
		}
		fmt.Println(ts)
		ts = monoNow()
	}
	if _, err := f.WriteAt([]byte(sqliteHeader), 0); err != nil {
		return fail("first write", err)
	}
	fmt.Println(ts)
	if _, err := in.ReadString('\n'); err != nil {
		return fail("stdin", err)
	}
	if _, err := f.WriteAt(backup, 0); err != nil {
		return fail("restore", err)
	}
	if err := f.Truncate(int64(len(backup))); err != nil {
		return fail("restore", err)
	}
	if err := f.Close(); err != nil {
		return fail("restore", err)
	}
	return 0
}

// sqliteHeader opens every SQLite database file.
const sqliteHeader = "SQLite format 3\x00"

func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// BenchmarkForeignWriteToFreeze measures, from outside the agent, the
// time from a foreign process's first write into a live main (taken by
// that process just before its pwrite(2)) to every live writer of the
// store stopped (waitid(WSTOPPED|WNOWAIT) on each, our children), with
// two writers committing as fast as they can. One trial per iteration;
// run with -benchtime=200x. It needs fanotify (root on Linux).
//
// first-write: the foreign process has the main open read-write (as a
// SQLite connection would), so only its write is seen. open-write: it
// opens the main write-only (as cp, dd, rsync --inplace do); where the
// gate holds that open, the writers are stopped before it returns, and
// the figures are from its open(2) call (an upper bound: this process
// learns of each stop through waitid, after the fact), with how long the
// open was held (hold-p50/p99-ms), the cost the gate adds to the tool.
// That no writer runs once the open returns is TestGateHoldsWritingOpen's
// and TestCpOverCheckpointingWriterNeverRaces' to show.
//
//	go test -run '^$' -bench ForeignWriteToFreeze -benchtime=200x -timeout 60m ./supervisor/
func BenchmarkForeignWriteToFreeze(b *testing.B) {
	for _, openWrite := range []bool{false, true} {
		name := "first-write"
		if openWrite {
			name = "open-write"
		}
		b.Run(name, func(b *testing.B) {
			home, db := testHome(b)
			// The agent's last lines are kept, not logged: a trial whose
			// incident stays open says what the agent did. Info, as the
			// discarding logger this had before: the freeze's debug lines
			// would be formatted on the path measured.
			log, logger := newRingLog(1000, slog.LevelInfo)
			a := startAgent(b, home, func(o *Options) {
				o.Reconcile = 10 * time.Second
				o.Logger = logger
			})
			if a.rw.mw == nil || !a.rw.mw.Attributed() {
				b.Skip("no fanotify: in-place rewrites are not caught at their first write here")
			}
			if openWrite && !a.rw.mw.Gated() {
				b.Skip("no fanotify permission events: opens are not held here")
			}
			var lat, hold []time.Duration
			for i := 0; i < b.N; i++ {
				t := rewriteTrial(b, a, db, openWrite, log)
				lat, hold = append(lat, t.freeze), append(hold, t.hold)
			}
			p50, p99 := percentiles(lat)
			b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
			if openWrite {
				h50, h99 := percentiles(hold)
				b.ReportMetric(float64(h50.Microseconds())/1000, "hold-p50-ms")
				b.ReportMetric(float64(h99.Microseconds())/1000, "hold-p99-ms")
			}
			b.Logf("trials=%d p50=%v p99=%v max=%v", len(lat), p50, p99, slices.Max(lat))
		})
	}
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	s := slices.Sorted(slices.Values(d))
	p := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return p(0.50), p(0.99)
}

// trial is one rewrite: foreign write (or open call) to every writer
// stopped, and how long its open was held.
type trial struct{ freeze, hold time.Duration }

func rewriteTrial(b *testing.B, a *Agent, db string, openWrite bool, log *ringLog) trial {
	b.StopTimer()
	// The backup the foreign writer restores, taken while nobody writes
	// (the last trial's writers are gone): the writers' rows since are
	// the incident's to salvage.
	backup := filepath.Join(filepath.Dir(db), "backup.db")
	if err := os.Remove(backup); err != nil && !os.IsNotExist(err) {
		b.Fatal(err)
	}
	walBackup(b, db, backup)
	var ws []*hermestest.Writer
	for _, s := range []string{"s1", "s2"} {
		w := hermestest.StartWriter(b, hermestest.WriterOptions{DB: db, Session: s})
		waitHolder(b, a, db, w.Pid)
		ws = append(ws, w)
	}
	ws[1].AcksGrow(b, 5)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), foreignWriterEnv+"="+db, foreignBackupEnv+"="+backup)
	if openWrite {
		cmd.Env = append(cmd.Env, foreignOpenEnv+"=1")
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// stderr is read once the process is reaped (exec's goroutine writes it).
	die := func(format string, args ...any) {
		b.Helper()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.Fatalf("foreign writer: %s: %s", fmt.Sprintf(format, args...), stderr.String())
	}
	out := bufio.NewReader(outp)
	if l, err := out.ReadString('\n'); err != nil || strings.TrimSpace(l) != "ready" {
		die("%q %v", l, err)
	}
	b.StartTimer()
	fmt.Fprintln(in, "go")
	for _, w := range ws {
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, w.Pid, &info, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				if err != nil {
					b.Fatalf("waitid: %v", err)
				}
				break
			}
		}
	}
	stopped := monoNow()
	b.StopTimer()
	fmt.Fprintln(in, "restore") // every writer is stopped
	readTS := func() int64 {
		l, err := out.ReadString('\n')
		if err != nil {
			die("%v", err)
		}
		ts, err := strconv.ParseInt(strings.TrimSpace(l), 10, 64)
		if err != nil {
			die("%q: %v", l, err)
		}
		return ts
	}
	var t trial
	start := readTS() // its first write, or its open call
	if openWrite {
		opened := readTS()
		t.hold = time.Duration(opened - start)
	}
	t.freeze = time.Duration(stopped - start)
	if err := cmd.Wait(); err != nil {
		b.Fatalf("foreign writer: %v: %s", err, stderr.String())
	}
	for _, w := range ws {
		waitExit(b, w, 30*time.Second)
	}
	// An incident of this store ends within seconds (the longest wait,
	// for joiners, is bounded at 10 s); one still open at 30 s is stuck.
	waitIncidentsEnd(b, a, db, 30*time.Second, log)
	// The next trial's writers need a whole store; say so here, not as
	// their "database disk image is malformed".
	if err := storeWhole(db); err != nil {
		b.Fatalf("after trial: %v", err)
	}
	return t
}
