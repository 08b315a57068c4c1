package holders

import (
	"fmt"
	"io/fs"
	"testing"

	"github.com/stateguard/stateguard/fileid"
)

// BenchmarkWatchForOneChanged is the index of a full scan of 10,000
// stores after one changed (a rename-over), the others' reads reused:
// its allocations are the garbage issue 16's freeze met. No filesystem:
// the reads are made up.
func BenchmarkWatchForOneChanged(b *testing.B) {
	const n = 10000
	targets := make([]Target, n)
	stats := make([]*pathStat, n)
	ino := uint64(1)
	read := func() *pathStat {
		ps := &pathStat{real: ""}
		for ri := range Roles {
			ps.cur[ri] = fileid.State{Exists: true, ID: fileid.ID{Dev: 1, Ino: ino}, Mode: fs.FileMode(0o644), Nlink: 1}
			ps.birth[ri] = int64(ino)
			ino++
		}
		return ps
	}
	for i := range targets {
		targets[i].Path = fmt.Sprintf("/bench/p%d/state.db", i)
		stats[i] = read()
	}
	prev := watchFor(targets, Options{reuse: stats})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := append([]*pathStat(nil), stats...)
		s[i%n] = read()
		if w := watchFor(targets, Options{reuse: s, prev: prev}); len(w.targets) != n {
			b.Fatal(len(w.targets))
		}
	}
}
