package walsalvage

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/stateguard/stateguard/store"
)

// TestSalvagePreviousGeneration is TestToolTable/cp's lost rows: a
// writer's checkpoint copied every frame into the main, its next commit
// restarted the WAL (new header, salt-1 one more, new salt-2) and it was
// stopped before that commit's frames were all written; then cp
// overwrote the main. The rows committed before the checkpoint are left
// only in the old frames beyond the new header. The WALs are real SQLite
// writes: the file before the restarting commit, with the first bytes of
// the file after it laid over it, is the file as it stood when the writer
// was stopped between two of its writes.
func TestSalvagePreviousGeneration(t *testing.T) {
	s := newSQLiteStore(t, false, true)
	for i := range 8 {
		s.message(fmt.Sprintf("checkpointed row %d", i), 1700000400+float64(i))
	}
	acks := s.acks
	old := s.wal()
	s.checkpoint()
	s.message("the commit the writer was stopped in", 1700000500)
	restarted := s.wal()
	oh, _ := store.ParseWALHeader(old)
	nh, _ := store.ParseWALHeader(restarted)
	if nh.Salt1 != oh.Salt1+1 || nh.Salt2 == oh.Salt2 {
		t.Fatalf("the restart did not start a new generation: salts %08x %08x, then %08x %08x", oh.Salt1, oh.Salt2, nh.Salt1, nh.Salt2)
	}
	frame := store.WALFrameBytes(nh.PageSize)
	for _, c := range []struct {
		name string
		// newBytes of the restarted WAL were written when the writer stopped.
		newBytes int64
		first    int
		verified bool
	}{
		{"header only", store.WALHeaderSize, 1, true},
		{"header and a torn first frame", store.WALHeaderSize + store.WALFrameHeaderSize, 2, false},
		{"header and one frame", store.WALHeaderSize + frame, 2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			wal := append(append([]byte{}, restarted[:c.newBytes]...), old[c.newBytes:]...)
			res, err := Salvage(context.Background(), bytes.NewReader(wal), int64(len(wal)), Options{})
			if err != nil {
				t.Fatal(err)
			}
			rep := res.Report
			if rep.FramesCommitted != 0 {
				t.Fatalf("%d committed frames under the new header, want none", rep.FramesCommitted)
			}
			p := rep.Previous
			if p == nil {
				t.Fatalf("no previous generation read (stop %q)", rep.Stop)
			}
			if p.Salts != [2]uint32{oh.Salt1, oh.Salt2} || p.FirstFrame != c.first || p.FirstVerified != c.verified {
				t.Fatalf("previous generation %+v: want salts %08x %08x from frame %d, verified %v", p, oh.Salt1, oh.Salt2, c.first, c.verified)
			}
			checkAcks(t, res, acks)
		})
	}
}

// TestPreviousGenerationDamagedFirstFrame: frame 1's checksum no longer
// chains from the rebuilt header, so its page is not used; the frames
// after it still chain from its stored checksum.
func TestPreviousGenerationDamagedFirstFrame(t *testing.T) {
	s := newSQLiteStore(t, false, true)
	for i := range 8 {
		s.message(fmt.Sprintf("checkpointed row %d", i), 1700000400+float64(i))
	}
	old := s.wal()
	s.checkpoint()
	s.message("the commit the writer was stopped in", 1700000500)
	wal := append(append([]byte{}, s.wal()[:store.WALHeaderSize]...), old[store.WALHeaderSize:]...)
	whole := readPrev(t, wal)
	wal[store.WALHeaderSize+store.WALFrameHeaderSize+100] ^= 0xff
	p := readPrev(t, wal)
	if whole == nil || p == nil || !whole.FirstVerified || p.FirstVerified || p.First != 1 || len(p.Frames) != len(whole.Frames)-1 {
		t.Fatalf("previous generation %+v, undamaged %+v: want frame 1 left out and the rest read", p, whole)
	}
}

// TestPreviousGenerationMustBeTheLastOne: frames two generations back
// are not the database as the restart found it (the generation in
// between changed it), so they are not read.
func TestPreviousGenerationMustBeTheLastOne(t *testing.T) {
	s := newSQLiteStore(t, false, true)
	for i := range 8 {
		s.message(fmt.Sprintf("two generations back %d", i), 1700000600+float64(i))
	}
	old := s.wal()
	s.checkpoint()
	s.message("one generation back", 1700000700)
	s.checkpoint()
	s.message("current", 1700000800)
	cur := s.wal()
	// The current header over the oldest generation's frames: salt-1 is
	// two more than theirs.
	wal := append(append([]byte{}, cur[:store.WALHeaderSize]...), old[store.WALHeaderSize:]...)
	res, err := Salvage(context.Background(), bytes.NewReader(wal), int64(len(wal)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Report.Previous != nil || len(res.Messages) != 0 {
		t.Fatalf("read %d rows, previous %+v, from frames two generations back", len(res.Messages), res.Report.Previous)
	}
}

func readPrev(t *testing.T, wal []byte) *Previous {
	t.Helper()
	w := mustReadWAL(t, wal)
	if err := w.ReadPrevious(context.Background(), bytes.NewReader(wal), int64(len(wal))); err != nil {
		t.Fatal(err)
	}
	return w.Previous
}
