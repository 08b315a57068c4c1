//go:build linux

package recovery

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDivertCountsQueuedDiverts: two incidents that captured the same
// orphan rows (seed 3's mispaired and replaced incidents shared one WAL)
// divert before either replays. The second counts the first's queued rows
// as present, so the rows are replayed once; without it both diverts hold
// them and both replays append them.
func TestDivertCountsQueuedDiverts(t *testing.T) {
	e, capture := sidecarLostEnv(t)
	first := e.divert(e.request(capture, "inc-1", KindSidecarLost))
	if first.ReplayRows != 5 {
		t.Fatalf("first divert: %d replay rows, want 5", first.ReplayRows)
	}

	alone := e.divert(e.request(capture, "inc-2", KindSidecarLost))
	if alone.ReplayRows != 5 {
		t.Fatalf("divert without the queue: %d replay rows, want 5 (the fixture no longer shows the duplicate)", alone.ReplayRows)
	}

	req := e.request(capture, "inc-3", KindSidecarLost)
	req.Queued = []string{"inc-1", "inc-3", "no-such-incident"}
	second := e.divert(req)
	if second.ReplayRows != 0 || len(second.ReplayFiles(false)) != 0 {
		t.Fatalf("second divert with inc-1 queued: %d replay rows in %d files, want 0", second.ReplayRows, len(second.ReplayFiles(false)))
	}
	if second.CaptureRows != 10 || second.HealthyRows != 5 {
		t.Fatalf("second divert counts: capture %d healthy %d, want 10 and 5 (queued rows are not the store's)", second.CaptureRows, second.HealthyRows)
	}

	w := e.healthyWriter()
	defer w.Close()
	if n := e.replayAll(w, first, false) + e.replayAll(w, second, false); n != 5 {
		t.Fatalf("replays appended %d rows, want 5", n)
	}
}

// TestDivertSkipsDamagedQueuedDivert: a queued divert whose file was
// changed after it was written is not counted (its own replay refuses it),
// and does not hold this divert back.
func TestDivertSkipsDamagedQueuedDivert(t *testing.T) {
	e, capture := sidecarLostEnv(t)
	first := e.divert(e.request(capture, "inc-1", KindSidecarLost))
	f := first.ReplayFiles(false)[0].Path
	if err := os.WriteFile(f, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	req := e.request(capture, "inc-2", KindSidecarLost)
	req.Queued = []string{"inc-1"}
	second := e.divert(req)
	if second.ReplayRows != 5 {
		t.Fatalf("divert with a damaged queued divert: %d replay rows, want 5", second.ReplayRows)
	}
	if _, err := os.Stat(filepath.Join(second.Dir, DivertManifestName)); err != nil {
		t.Fatal(err)
	}
}
