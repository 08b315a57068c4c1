package incident

import (
	"testing"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
)

// TestCutTime: the time half of a cut read at the pins. A replacement's
// is the change itself; a rewritten main's too when the gate froze the
// writers before the tool wrote (what they had committed by then is what
// the restore overwrote, however long the tool ran before its open); a
// late cut (writers frozen after the first write) keeps the 200 ms margin.
func TestCutTime(t *testing.T) {
	seen := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		name string
		li   live
		want time.Time
	}{
		{"replaced", live{kind: journal.KindReplaced, replacedAt: seen}, seen},
		{"replaced, late flag ignored", live{kind: journal.KindReplaced, replacedAt: seen, cutLate: true}, seen},
		{"rewritten, gated", live{kind: journal.KindRewritten, replacedAt: seen}, seen},
		{"rewritten, late", live{kind: journal.KindRewritten, replacedAt: seen, cutLate: true}, seen.Add(-replaceMargin)},
	} {
		if got := c.li.cutTime(); !got.Equal(c.want) {
			t.Errorf("%s: cut time %v, want %v", c.name, got.Sub(seen), c.want.Sub(seen))
		}
	}
}

// TestFrozenBefore: a rewrite's cut is exact only when every writer was
// frozen by the moment the rewrite was seen; a read-only holder does not
// count.
func TestFrozenBefore(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	w := func(pid int) holders.Process { return holders.Process{Pid: pid, Access: holders.AccessWrite} }
	ro := holders.Process{Pid: 3, Access: holders.AccessRead}
	for _, c := range []struct {
		name  string
		o     Opening
		exact bool
	}{
		{"all frozen before", Opening{At: at, Orphans: []holders.Process{w(1), w(2), ro}, Frozen: map[int]time.Time{1: at.Add(-time.Millisecond), 2: at}}, true},
		{"one frozen after", Opening{At: at, Orphans: []holders.Process{w(1), w(2)}, Frozen: map[int]time.Time{1: at, 2: at.Add(time.Millisecond)}}, false},
		{"one not frozen", Opening{At: at, Orphans: []holders.Process{w(1), w(2)}, Frozen: map[int]time.Time{1: at}}, false},
		{"no orphans", Opening{At: at}, false},
	} {
		if got := frozenBefore(c.o); got != c.exact {
			t.Errorf("%s: frozenBefore %t, want %t", c.name, got, c.exact)
		}
	}
}
