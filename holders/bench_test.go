//go:build linux

package holders

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// The benchmark host: ~500 extra processes holding ~20 fds each (some on
// unlinked files, so lsof +L1 has work to report), plus one live writer on
// the watched store. Built once, torn down after all benchmarks.
const (
	fleetProcs = 500
	fleetFDs   = 20
)

type benchFleet struct {
	db     string
	writer *hermestest.Writer
	cmds   []*exec.Cmd
	dir    string
	err    error
}

var (
	fleetOnce sync.Once
	fleet     benchFleet
)

func startBenchFleet(b *testing.B) *benchFleet {
	b.Helper()
	fleetOnce.Do(func() {
		afterTests = append(afterTests, stopBenchFleet)
		fleet.err = fleet.start()
	})
	if fleet.err != nil {
		b.Fatal(fleet.err)
	}
	return &fleet
}

func (f *benchFleet) start() error {
	dir, err := os.MkdirTemp("", "stateguard-bench-")
	if err != nil {
		return err
	}
	f.dir = dir
	f.db = filepath.Join(dir, "store", "state.db")
	if err := os.Mkdir(filepath.Dir(f.db), 0o700); err != nil {
		return err
	}
	bin, err := hermestest.WriterBinary()
	if err != nil {
		return err
	}
	f.writer, err = hermestest.SpawnWriter(bin, hermestest.WriterOptions{
		DB: f.db, Create: true, Rate: 20, Ack: filepath.Join(dir, "ack"),
	}, 30*time.Second)
	if err != nil {
		return err
	}
	var files []*os.File
	for i := range fleetFDs {
		fl, err := os.Create(filepath.Join(dir, fmt.Sprintf("held-%02d", i)))
		if err != nil {
			return err
		}
		defer fl.Close()
		if i%4 == 0 {
			os.Remove(fl.Name()) // unlinked but held: what lsof +L1 lists
		}
		files = append(files, fl)
	}
	for range fleetProcs {
		cmd := exec.Command("sleep", "3600")
		cmd.ExtraFiles = files
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start fleet process %d: %w", len(f.cmds), err)
		}
		f.cmds = append(f.cmds, cmd)
	}
	return nil
}

func stopBenchFleet() {
	for _, c := range fleet.cmds {
		c.Process.Kill()
	}
	for _, c := range fleet.cmds {
		c.Wait()
	}
	if fleet.writer != nil {
		fleet.writer.Kill()
		<-fleet.writer.Done()
	}
	if fleet.dir != "" {
		os.RemoveAll(fleet.dir)
	}
}

// cpuPerOp reports the CPU time (user+system) per op next to the wall
// time: on a shared machine wall time swings with the load, CPU time much
// less. who is RUSAGE_SELF for in-process scans, RUSAGE_CHILDREN for lsof.
func cpuPerOp(b *testing.B, who int) func() {
	cpu := func() time.Duration {
		var ru unix.Rusage
		if err := unix.Getrusage(who, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func BenchmarkFullScan(b *testing.B) {
	f := startBenchFleet(b)
	targets := []Target{{Path: f.db}}
	// maps=text forces the /proc/<pid>/maps text path older kernels take.
	for _, mode := range []string{"query", "text"} {
		b.Run("maps="+mode, func(b *testing.B) {
			if mode == "text" {
				prev := procmapQuery.Swap(-1)
				defer procmapQuery.Store(prev)
			}
			loopFullScan(b, targets)
		})
	}
}

// BenchmarkLsof is the baseline: what an operator would run to find
// processes holding unlinked files.
func BenchmarkLsof(b *testing.B) {
	lsof := lsofPath(b)
	startBenchFleet(b)
	loopLsof(b, lsof)
}

// loopFullScan is the timed loop of a full scan of the fleet's store,
// which has the one writer for holder.
func loopFullScan(b *testing.B, targets []Target) {
	defer cpuPerOp(b, unix.RUSAGE_SELF)()
	for b.Loop() {
		res, err := Scan(targets)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Stores[0].Holders) != 1 {
			b.Fatalf("holders %+v", res.Stores[0].Holders)
		}
	}
}

// lsofPath is lsof's path, skipping the baseline where it is missing.
func lsofPath(b *testing.B) string {
	lsof, err := exec.LookPath("lsof")
	if err != nil {
		b.Skip("lsof is not installed (apt-get install lsof); no baseline")
	}
	return lsof
}

// loopLsof is the timed loop of `lsof +L1`, the baseline.
func loopLsof(b *testing.B, lsof string) {
	defer cpuPerOp(b, unix.RUSAGE_CHILDREN)()
	for b.Loop() {
		out, err := exec.Command(lsof, "+L1").Output()
		if err != nil && len(out) == 0 {
			b.Fatalf("lsof: %v", err)
		}
	}
}

func BenchmarkTargetedScanWarm(b *testing.B) {
	f := startBenchFleet(b)
	var c Cache
	t := Target{Path: f.db}
	if _, err := c.Scan([]Target{t}); err != nil {
		b.Fatal(err)
	}
	defer cpuPerOp(b, unix.RUSAGE_SELF)()
	for b.Loop() {
		s, err := c.Targeted(t)
		if err != nil {
			b.Fatal(err)
		}
		if len(s.Holders) != 1 {
			b.Fatalf("holders %+v", s.Holders)
		}
	}
}
