//go:build linux

package supervisor

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// foreignWriterEnv makes the test binary a foreign writer: it opens the
// store's main for writing, waits for a line on stdin, prints the
// CLOCK_MONOTONIC time and writes the main's first page back over itself
// (the same bytes: the store stays whole, the write is still a write no
// connection made). With foreignOpenEnv set it opens the main write-only
// only after the line (the open a gate holds) and prints the time before
// its open(2) and the time it returned.
const (
	foreignWriterEnv = "STATEGUARD_TEST_FOREIGN_WRITER"
	foreignOpenEnv   = "STATEGUARD_TEST_FOREIGN_OPEN"
)

func foreignWriterMain(path string) int {
	r, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	page := make([]byte, 4096)
	if _, err := r.ReadAt(page, 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	openLate := os.Getenv(foreignOpenEnv) != ""
	var f *os.File
	if !openLate {
		if f, err = os.OpenFile(path, os.O_RDWR, 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 1
	}
	ts := monoNow()
	if openLate {
		if f, err = os.OpenFile(path, os.O_WRONLY, 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(ts)
		ts = monoNow()
	}
	if _, err := f.WriteAt(page, 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(ts)
	f.Close()
	return 0
}

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
//	go test -run '^$' -bench ForeignWriteToFreeze -benchtime=200x ./supervisor/
func BenchmarkForeignWriteToFreeze(b *testing.B) {
	for _, openWrite := range []bool{false, true} {
		name := "first-write"
		if openWrite {
			name = "open-write"
		}
		b.Run(name, func(b *testing.B) {
			home, db := testHome(b)
			a := startAgent(b, home, func(o *Options) {
				o.Reconcile = 10 * time.Second
				o.Logger = discardLogger()
			})
			if a.rw.mw == nil || !a.rw.mw.Attributed() {
				b.Skip("no fanotify: in-place rewrites are not caught at their first write here")
			}
			if openWrite && !a.rw.mw.Gated() {
				b.Skip("no fanotify permission events: opens are not held here")
			}
			var lat, hold []time.Duration
			for i := 0; i < b.N; i++ {
				t := rewriteTrial(b, a, db, openWrite)
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

func rewriteTrial(b *testing.B, a *Agent, db string, openWrite bool) trial {
	b.StopTimer()
	var ws []*hermestest.Writer
	for _, s := range []string{"s1", "s2"} {
		w := hermestest.StartWriter(b, hermestest.WriterOptions{DB: db, Session: s})
		waitHolder(b, a, db, w.Pid)
		ws = append(ws, w)
	}
	ws[1].AcksGrow(b, 5)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), foreignWriterEnv+"="+db)
	if openWrite {
		cmd.Env = append(cmd.Env, foreignOpenEnv+"=1")
	}
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
	out := bufio.NewReader(outp)
	if l, err := out.ReadString('\n'); err != nil || strings.TrimSpace(l) != "ready" {
		b.Fatalf("foreign writer: %q %v", l, err)
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
	readTS := func() int64 {
		l, err := out.ReadString('\n')
		if err != nil {
			b.Fatalf("foreign writer: %v", err)
		}
		ts, err := strconv.ParseInt(strings.TrimSpace(l), 10, 64)
		if err != nil {
			b.Fatal(err)
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
	_ = cmd.Wait()
	for _, w := range ws {
		waitExit(b, w, 30*time.Second)
	}
	hermestest.Eventually(b, "the incident to end", 60*time.Second, func() bool {
		incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{OpenOnly: true})
		return err == nil && len(incs) == 0
	})
	return t
}
