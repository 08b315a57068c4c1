//go:build linux

package holders

// The full-host scan with "containers": processes each in a mount
// namespace of its own, holding ~20 fds on files of a directory
// bind-mounted at another path, as a container with a volume does. Their
// link texts are their own view, so the scan cannot use its path filter
// on them and matches every fd by inode.
//
// This file uses only what the package had before the scan matched by
// inode (Scan, Target, and the fleet of bench_test.go), so
// scripts/bench-holders.sh copies it into a checkout of an earlier commit
// to measure that scan on the same host, in the same run.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

const containerFDs = 20

// startContainers starts n processes in their own mount namespaces next
// to the benchmark fleet and returns what stops them.
func startContainers(b *testing.B, f *benchFleet, n int) func() {
	b.Helper()
	unshare, err1 := exec.LookPath("unshare")
	bash, err2 := exec.LookPath("bash")
	if os.Geteuid() != 0 || err1 != nil || err2 != nil {
		b.Skip("containers need root, unshare and bash")
	}
	ct, view := filepath.Join(f.dir, "ct"), filepath.Join(f.dir, "ct-view")
	for _, d := range []string{ct, view} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for i := range containerFDs {
		if err := os.WriteFile(filepath.Join(ct, fmt.Sprintf("vol-%02d", i)), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	// The bind mount exists only inside each namespace (private
	// propagation); bash's {fd} redirections keep every file open
	// across the exec of sleep.
	script := `mount --bind "$1" "$2" || exit 9; for f in "$2"/vol-*; do exec {fd}<"$f"; done; exec sleep 3600`
	var cmds []*exec.Cmd
	stop := func() {
		for _, c := range cmds {
			c.Process.Kill()
		}
		for _, c := range cmds {
			c.Wait()
		}
	}
	for range n {
		c := exec.Command(unshare, "--mount", "--propagation", "private", bash, "-c", script, "container", ct, view)
		if err := c.Start(); err != nil {
			stop()
			b.Fatalf("start a container: %v", err)
		}
		cmds = append(cmds, c)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, c := range cmds {
		for {
			ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", c.Process.Pid))
			if len(ents) >= containerFDs {
				break
			}
			if time.Now().After(deadline) {
				stop()
				b.Fatalf("container %d opened %d fds, want %d", c.Process.Pid, len(ents), containerFDs)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return stop
}

// BenchmarkHostScan is the full-host scan of the fleet, without and with
// 50 containers.
func BenchmarkHostScan(b *testing.B) {
	f := startBenchFleet(b)
	targets := []Target{{Path: f.db}}
	withContainers(b, f, func(b *testing.B) { loopFullScan(b, targets) })
}

// BenchmarkHostLsof is `lsof +L1` on the same hosts, the baseline an
// operator has.
func BenchmarkHostLsof(b *testing.B) {
	lsof := lsofPath(b)
	f := startBenchFleet(b)
	withContainers(b, f, func(b *testing.B) { loopLsof(b, lsof) })
}

// withContainers runs loop on the fleet without and with 50 containers.
func withContainers(b *testing.B, f *benchFleet, loop func(*testing.B)) {
	for _, n := range []int{0, 50} {
		b.Run(fmt.Sprintf("containers=%d", n), func(b *testing.B) {
			if n > 0 {
				defer startContainers(b, f, n)()
			}
			loop(b)
		})
	}
}
