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
// connection made).
const foreignWriterEnv = "STATEGUARD_TEST_FOREIGN_WRITER"

func foreignWriterMain(path string) int {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	page := make([]byte, 4096)
	if _, err := f.ReadAt(page, 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 1
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	if _, err := f.WriteAt(page, 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(ts.Nano())
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
//	go test -run '^$' -bench ForeignWriteToFreeze -benchtime=200x ./supervisor/
func BenchmarkForeignWriteToFreeze(b *testing.B) {
	home, db := testHome(b)
	a := startAgent(b, home, func(o *Options) {
		o.Reconcile = 10 * time.Second
		o.Logger = discardLogger()
	})
	if a.rw.mw == nil || !a.rw.mw.Attributed() {
		b.Skip("no fanotify: in-place rewrites are not caught at their first write here")
	}
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		lat = append(lat, rewriteTrial(b, a, db))
	}
	slices.Sort(lat)
	p := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	b.ReportMetric(float64(p(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p(0.99).Microseconds())/1000, "p99-ms")
	b.Logf("trials=%d p50=%v p99=%v max=%v", len(lat), p(0.5), p(0.99), lat[len(lat)-1])
}

func rewriteTrial(b *testing.B, a *Agent, db string) time.Duration {
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
	l, err := out.ReadString('\n')
	if err != nil {
		b.Fatalf("foreign writer: %v", err)
	}
	wrote, err := strconv.ParseInt(strings.TrimSpace(l), 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	_ = cmd.Wait()
	for _, w := range ws {
		waitExit(b, w, 30*time.Second)
	}
	hermestest.Eventually(b, "the incident to end", 60*time.Second, func() bool {
		incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{OpenOnly: true})
		return err == nil && len(incs) == 0
	})
	return time.Duration(stopped - wrote)
}
