package watcher

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// Detection latency: from os.Rename (a restore's rename-over of state.db)
// returning to the consumer receiving the StoreChanged event. Run with
// -benchtime=1000x (or more) for the percentiles to mean something:
//
//	go test -run '^$' -bench Detect -benchtime=1000x ./watcher

func BenchmarkDetectRename(b *testing.B) { benchDetect(b, false) }

// The same while a writer commits as fast as it can into a watched store,
// so the loop is also reading and dropping a -wal write per commit.
func BenchmarkDetectRenameUnderWrites(b *testing.B) { benchDetect(b, true) }

func benchDetect(b *testing.B, writes bool) {
	const dirs = 256 // each key is revisited long after its debounce window
	root := b.TempDir()
	var targets []Target
	for i := range dirs {
		d := filepath.Join(root, fmt.Sprintf("p%03d", i))
		if err := os.Mkdir(d, 0o700); err != nil {
			b.Fatal(err)
		}
		db := filepath.Join(d, "state.db")
		if err := os.WriteFile(db, nil, 0o600); err != nil {
			b.Fatal(err)
		}
		targets = append(targets, Target{Key: db, Dir: d, Names: storeNames})
	}
	if writes {
		d := filepath.Join(root, "busy")
		if err := os.Mkdir(d, 0o700); err != nil {
			b.Fatal(err)
		}
		db := filepath.Join(d, "state.db")
		hermestest.StartWriter(b, hermestest.WriterOptions{DB: db, Create: true})
		targets = append(targets, Target{Key: db, Dir: d, Names: storeNames})
	}
	w, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close(context.Background())
	if err := w.Set(targets, nil); err != nil {
		b.Fatal(err)
	}

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		tg := targets[i%dirs]
		tmp := tg.Key + ".restore-tmp"
		if err := os.WriteFile(tmp, []byte("new generation"), 0o600); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, tg.Key); err != nil {
			b.Fatal(err)
		}
		renamed := time.Now()
		for {
			ev := recvBench(b, w)
			if ev.Kind == StoreChanged && ev.Key == tg.Key && !ev.At.Before(renamed.Add(-time.Second)) {
				lat = append(lat, time.Since(renamed))
				break
			}
			if ev.Kind == StoreChanged && ev.Key != tg.Key {
				b.Fatalf("unexpected %+v", ev)
			}
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkDetectRenamePolling is the baseline: no fsnotify, a reconcile
// every second, the design polling tools use. A few trials only, each at
// a random phase of the ticker; b.N is ignored.
func BenchmarkDetectRenamePolling(b *testing.B) {
	const trials = 5
	dir := b.TempDir()
	db := filepath.Join(dir, "state.db")
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		b.Fatal(err)
	}
	w, err := New(Config{DisableNotify: true, Reconcile: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close(context.Background())
	if err := w.Set([]Target{{Key: db, Dir: dir, Names: storeNames}}, nil); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	for range trials {
		// Phase randomisation, not synchronisation: a rename right after
		// a tick would always cost a full interval.
		time.Sleep(rand.N(time.Second))
		tmp := db + ".restore-tmp"
		if err := os.WriteFile(tmp, nil, 0o600); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, db); err != nil {
			b.Fatal(err)
		}
		renamed := time.Now()
		for {
			ev := recvBench(b, w)
			if ev.Kind == Reconcile && ev.At.After(renamed) {
				lat = append(lat, time.Since(renamed))
				break
			}
		}
	}
	reportLatency(b, lat)
}

func recvBench(b *testing.B, w *Watcher) Event {
	select {
	case ev := <-w.Events():
		return ev
	case <-time.After(10 * time.Second):
		b.Fatal("no event within 10s")
	}
	panic("unreachable")
}

func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		i := int(p*float64(len(lat))+0.5) - 1
		return us(lat[min(max(i, 0), len(lat)-1)])
	}
	b.ReportMetric(0, "ns/op") // per-op time is the trial loop, not a result
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(us(lat[len(lat)-1]), "max-µs")
	b.ReportMetric(float64(len(lat)), "trials")
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
