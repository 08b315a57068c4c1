//go:build linux

package supervisor

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// BenchmarkDetectToFreeze measures, from outside the agent, the time from
// rename(2) of a fresh state.db over a store returning to the writer
// being stopped, with the writer committing as fast as it can. The stop
// is observed with waitid(WSTOPPED|WNOWAIT) on the writer (our child),
// so the measurement is an event, not a poll. Each iteration is one
// trial; run with -benchtime=200x. "notify" is stateguard; "poll-1s" is
// the same agent with fsnotify off and a 1 s reconcile, the polling design.
//
//	go test -run '^$' -bench DetectToFreeze -benchtime=200x ./supervisor/
func BenchmarkDetectToFreeze(b *testing.B) {
	for _, mode := range []struct {
		name string
		mod  func(*Options)
	}{
		{"notify", func(o *Options) { o.Reconcile = 10 * time.Second }},
		{"poll-1s", func(o *Options) { o.DisableNotify, o.Reconcile = true, time.Second }},
	} {
		b.Run(mode.name, func(b *testing.B) {
			home, db := testHome(b)
			a := startAgent(b, home, func(o *Options) {
				mode.mod(o)
				o.Policies = incident.PolicySet{Replaced: incident.PolicyKill, Mispaired: incident.PolicyKill, SidecarLost: incident.PolicyKill}
				o.Logger = discardLogger()
			})
			var lat []time.Duration
			var orphanCommits []int
			for i := 0; i < b.N; i++ {
				d, n := detectTrial(b, a, db)
				lat = append(lat, d)
				orphanCommits = append(orphanCommits, n)
			}
			slices.Sort(lat)
			slices.Sort(orphanCommits)
			p := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
			pc := func(q float64) int {
				return orphanCommits[min(len(orphanCommits)-1, int(q*float64(len(orphanCommits))))]
			}
			b.ReportMetric(float64(p(0.50).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(p(0.99).Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(pc(0.50)), "p50-orphan-commits")
			b.ReportMetric(float64(pc(0.99)), "p99-orphan-commits")
			b.Logf("%s: trials=%d p50=%v p99=%v max=%v orphan commits p50=%d p99=%d max=%d",
				mode.name, len(lat), p(0.5), p(0.99), lat[len(lat)-1], pc(0.5), pc(0.99), orphanCommits[len(orphanCommits)-1])
		})
	}
}

func detectTrial(b *testing.B, a *Agent, db string) (time.Duration, int) {
	b.StopTimer()
	w := hermestest.StartWriter(b, hermestest.WriterOptions{DB: db, Create: true})
	waitHolder(b, a, db, w.Pid)
	fresh := db + ".restore-tmp"
	if err := hermestest.CreateStore(fresh); err != nil {
		b.Fatal(err)
	}
	before := len(w.Acks(b))
	b.StartTimer()
	if err := os.Rename(fresh, db); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
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
	d := time.Since(t0)
	b.StopTimer()
	after := len(w.Acks(b))
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	waitExit(b, w, 30*time.Second)
	hermestest.Eventually(b, "the incident to end", 60*time.Second, func() bool {
		incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{OpenOnly: true})
		return err == nil && len(incs) == 0
	})
	return d, max(0, after-before)
}
