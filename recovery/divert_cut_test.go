//go:build linux

package recovery

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/store"
)

// readCut reads the orphan's WAL position as the agent does at detection.
func (s *sqlStore) readCut() store.WALCut {
	s.t.Helper()
	wal, err := os.Open(s.path + "-wal")
	if err != nil {
		s.t.Fatal(err)
	}
	defer wal.Close()
	shm, err := os.Open(s.path + "-shm")
	if err != nil {
		s.t.Fatal(err)
	}
	defer shm.Close()
	c, err := store.ReadWALCut(wal, shm)
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// cutFixture is an orphan whose restore came at base+4.5 (the backup
// holds rows 0-1): rows 2-4 were committed before the cut, row 5 was
// stamped before the restore (base+2.5) but committed after the cut, rows
// 6-7 after both. after runs once the rows are in, before the capture.
func cutFixture(t *testing.T, after func(o *sqlStore)) (*divertEnv, DivertRequest, float64) {
	e := newDivertEnv(t)
	o := e.orphan
	o.session("r1", "cli", 100)
	base := float64(1_790_000_000)
	for i := range 2 {
		o.add("r1", "user", "row "+itoa(i), base+float64(i))
	}
	o.checkpoint()
	o.copyMainTo(e.healthy)
	for i := 2; i < 5; i++ {
		o.add("r1", "user", "row "+itoa(i), base+float64(i))
	}
	cut := o.readCut()
	if cut.Frame == 0 {
		t.Fatal("no committed frame before the cut")
	}
	o.add("r1", "user", "row 5", base+2.5)
	o.add("r1", "user", "row 6", base+6)
	o.add("r1", "user", "row 7", base+7)
	if after != nil {
		after(o)
	}
	capture := o.capture(KindReplaced, "inc-cut")
	req := e.request(capture, "inc-cut", KindReplaced)
	// The time rule's replacement time, margin included.
	req.ReplacedAt = time.Unix(int64(base)+3, 0)
	req.Cut = &FrameCut{WALCut: cut, At: time.Unix(int64(base)+4, 500_000_000)}
	return e, req, base
}

func divertContents(t *testing.T, rep DivertReport) (replay, pre []string) {
	t.Helper()
	for _, f := range rep.Files {
		for _, l := range jsonlLines(t, f.Path) {
			c, _ := l.Get("content")
			if f.PreReplacement {
				pre = append(pre, c.Str)
			} else {
				replay = append(replay, c.Str)
			}
		}
	}
	return replay, pre
}

// The frame cut keeps a row stamped before the restore but committed
// after it (row 5, which the time rule would drop), and leaves rolled
// back a row stamped inside the time rule's margin (row 4, which the time
// rule would replay back).
func TestDivertFrameCut(t *testing.T) {
	e, req, _ := cutFixture(t, nil)
	rep := e.divert(req)
	replay, pre := divertContents(t, rep)
	if !slices.Equal(replay, []string{"row 5", "row 6", "row 7"}) || !slices.Equal(pre, []string{"row 2", "row 3", "row 4"}) {
		t.Fatalf("replay %v, pre %v; want rows 5-7 replayed, 2-4 rolled back (cut note %q)", replay, pre, rep.CutNote)
	}
	if !strings.HasPrefix(rep.CutNote, "wal frame ") {
		t.Fatalf("cut note %q: want the frame cut", rep.CutNote)
	}
}

// When the capture cannot show the orphan at the cut, the divert falls
// back to the timestamps (with the margin the request's ReplacedAt has)
// and says why.
func TestDivertFrameCutFallsBack(t *testing.T) {
	timeRule := func(t *testing.T, rep DivertReport, why string) {
		t.Helper()
		replay, pre := divertContents(t, rep)
		if !slices.Equal(replay, []string{"row 4", "row 6", "row 7"}) || !slices.Equal(pre, []string{"row 2", "row 3", "row 5"}) {
			t.Fatalf("replay %v, pre %v; want the time rule's split", replay, pre)
		}
		if !strings.HasPrefix(rep.CutNote, "timestamps: ") || !strings.Contains(rep.CutNote, why) {
			t.Fatalf("cut note %q: want the timestamps, because %q", rep.CutNote, why)
		}
	}
	t.Run("other salts", func(t *testing.T) {
		e, req, _ := cutFixture(t, nil)
		req.Cut.Salt1++
		timeRule(t, e.divert(req), "restarted its WAL")
	})
	t.Run("checkpointed past the cut", func(t *testing.T) {
		e, req, _ := cutFixture(t, func(o *sqlStore) { o.exec("PRAGMA wal_checkpoint(PASSIVE)") })
		timeRule(t, e.divert(req), "checkpointed frame")
	})
	t.Run("no cut", func(t *testing.T) {
		e, req, _ := cutFixture(t, nil)
		req.Cut = nil
		timeRule(t, e.divert(req), "no wal position")
	})
}

// A sidecar_lost store whose schema lived only in the lost -wal has no
// tables at its path: every row of the capture is diverted, with the
// capture's session row, for the replay to write once Hermes has created
// the schema again (it waits for that), instead of the divert failing.
func TestDivertIntoStoreWithoutSchema(t *testing.T) {
	e := newDivertEnv(t)
	o := e.orphan
	o.session("r1", "cli", 100)
	for i := range 3 {
		o.add("r1", "user", "row "+itoa(i), 1_790_000_000+float64(i))
	}
	capture := o.capture(KindSidecarLost, "inc-noschema")
	f, err := os.OpenFile(e.healthy, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close() // an empty main, as the -wal's loss leaves it
	rep := e.divert(e.request(capture, "inc-noschema", KindSidecarLost))
	replay, _ := divertContents(t, rep)
	if !slices.Equal(replay, []string{"row 0", "row 1", "row 2"}) || len(rep.Files) != 1 || !rep.Files[0].NewSession || rep.Files[0].Session == nil {
		t.Fatalf("divert into a store without schema: rows %v, files %+v", replay, rep.Files)
	}
}

// A divert read from the WAL's page images (a rewritten main: the WAL
// fits no main) takes the frame cut too: the rows at the cut are those
// the page images up to the cut's frame hold. Before, it cut by the
// timestamps alone, which replays back rows stamped in the margin and
// drops a row stamped before the change but committed after it.
func TestDivertWALImagesFrameCut(t *testing.T) {
	_, req, _ := cutFixture(t, nil)
	req.Kind = KindRewritten
	rep, _, err := DivertWALImages(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	replay, pre := divertContents(t, rep)
	if !slices.Equal(replay, []string{"row 5", "row 6", "row 7"}) || !slices.Equal(pre, []string{"row 2", "row 3", "row 4"}) {
		t.Fatalf("replay %v, pre %v; want rows 5-7 replayed, 2-4 rolled back (cut note %q)", replay, pre, rep.CutNote)
	}
	if !strings.HasPrefix(rep.CutNote, "wal frame ") || !strings.Contains(rep.CutNote, "page images") {
		t.Fatalf("cut note %q: want the frame cut of the page images", rep.CutNote)
	}
	// Without a cut it is the timestamp rule, and the note says so.
	req.Cut, req.IncidentID = nil, "inc-cut-none"
	rep, _, err = DivertWALImages(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	replay, pre = divertContents(t, rep)
	if !slices.Equal(replay, []string{"row 4", "row 6", "row 7"}) || !slices.Equal(pre, []string{"row 2", "row 3", "row 5"}) ||
		!strings.HasPrefix(rep.CutNote, "timestamps: ") {
		t.Fatalf("no cut: replay %v, pre %v, note %q; want the time rule", replay, pre, rep.CutNote)
	}
}
