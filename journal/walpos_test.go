package journal

import (
	"context"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
)

// A store's position survives the journal's reopen, the newest record
// replaces the last, and ids past int64's range keep their bits.
func TestWALPositionsRoundTrip(t *testing.T) {
	ctx := context.Background()
	j, path := openTestJournal(t)
	at := time.Unix(1700000000, 123456789).UTC()
	p := WALPosition{Store: "/h/state.db", Main: fileid.ID{Dev: 2049, Ino: 1 << 63}, MainSize: 4096 * 9, MainCounter: 41, MainPage1: 1<<64 - 3, MainBirth: 1700000000_987654321,
		WAL: fileid.ID{Dev: 2049, Ino: 77}, Salt1: 0xdeadbeef, Salt2: 7, Frame: 120, Backfilled: 60, At: at}
	if err := j.RecordWALPositions(ctx, p); err != nil {
		t.Fatal(err)
	}
	q := p
	q.Store, q.Frame = "/h/profiles/x/state.db", 3
	if err := j.RecordWALPositions(ctx, q); err != nil {
		t.Fatal(err)
	}
	p.Frame, p.At = 130, at.Add(time.Second)
	if err := j.RecordWALPositions(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j2, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	ps, err := j2.WALPositions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[p.Store] != p || ps[q.Store] != q {
		t.Fatalf("positions %+v, want %+v and %+v", ps, p, q)
	}
	if !p.SameAs(WALPosition{Store: p.Store, Main: p.Main, MainSize: p.MainSize, MainCounter: 41, MainPage1: p.MainPage1, MainBirth: p.MainBirth, WAL: p.WAL,
		Salt1: p.Salt1, Salt2: 7, Frame: 130, Backfilled: 60}) {
		t.Error("SameAs compares the read time")
	}
}
