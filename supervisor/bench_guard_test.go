package supervisor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// BenchmarkGuardWriterThroughput is the test writer's commit rate (acks/s,
// from its own ack timestamps, so process start is not counted) over 2000
// messages with the guard paused (no locks: "off") and armed ("on"), on
// the same store and agent. Each iteration runs both, alternating which
// goes first, so store growth and machine noise fall on both sides alike.
// A lingering connection keeps -wal/-shm throughout, as a Hermes gateway
// does. The goal is on/off = 1 within noise: the guard's read locks are
// outside every range a reader or writer takes exclusively.
//
//	go test ./supervisor/ -run '^$' -bench GuardWriter -benchtime 2x -count 5
func BenchmarkGuardWriterThroughput(b *testing.B) {
	const messages = 2000
	ctx := context.Background()
	home, db := testHome(b)
	a := startAgent(b, home, func(o *Options) { o.Guard = true; o.Logger = discardLogger() })
	hermestest.StartWriter(b, hermestest.WriterOptions{DB: db, Session: "hold", Count: 1, Linger: true})
	waitGuard(b, a, db, control.GuardArmed, 10*time.Second)
	run := func(session string, armed bool) float64 {
		if armed {
			if _, st, err := a.ResumeGuard(ctx, db); err != nil || st.State != control.GuardArmed {
				b.Fatalf("resume: %+v %v", st, err)
			}
		} else if _, st, err := a.PauseGuard(ctx, db, time.Hour, "benchmark"); err != nil || st.State != control.GuardPaused {
			b.Fatalf("pause: %+v %v", st, err)
		}
		w := hermestest.StartWriter(b, hermestest.WriterOptions{DB: db, Session: session, Count: messages})
		waitExit(b, w, 2*time.Minute)
		acks := w.Acks(b)
		if len(acks) != messages {
			b.Fatalf("%d acks, want %d", len(acks), messages)
		}
		if st := a.guardStatus(db); (st.State == control.GuardArmed) != armed {
			b.Fatalf("guard %+v after the run, want armed=%v", st, armed)
		}
		return float64(len(acks)-1) / (acks[len(acks)-1].Timestamp - acks[0].Timestamp)
	}
	var off, on float64
	b.ResetTimer()
	for i := range b.N {
		first := i%2 == 0
		for _, armed := range []bool{first, !first} {
			r := run(fmt.Sprintf("b%d-%v", i, armed), armed)
			if armed {
				on += r
			} else {
				off += r
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(off/float64(b.N), "acks/s-off")
	b.ReportMetric(on/float64(b.N), "acks/s-on")
	b.ReportMetric(on/off, "on/off")
}
