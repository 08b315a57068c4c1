//go:build linux

package recovery

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/walsalvage"
)

// TestDivertSalvaged: the test writer commits into a store whose WAL is
// then taken while the main is rewritten in place with an empty backup
// (cp over state.db), so the orphan WAL has no main it fits. The rows
// salvaged from its page images are diverted like a capture's, replayed,
// and every acknowledged row is in the healthy store exactly once, its
// session created from the salvaged session row; a second divert of the
// incident writes nothing.
func TestDivertSalvaged(t *testing.T) {
	e := newDivertEnv(t)
	if err := hermestest.CreateStore(e.healthy); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(e.dir, "backup.db")
	copyFile(t, e.healthy, backup)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: e.healthy, Count: 12, Linger: true, CheckpointEvery: -1, ToolEvery: 5})
	acks := w.WaitAcks(t, 12)
	capture := filepath.Join(e.dir, "capture")
	if err := os.Mkdir(capture, 0o700); err != nil {
		t.Fatal(err)
	}
	copyFile(t, e.healthy+"-wal", filepath.Join(capture, "state.db-wal"))
	w.Kill()
	<-w.Done()
	// The operator's cp: same inode, the backup's bytes, sidecars gone.
	writeFile(t, e.healthy, readAll(t, backup))
	for _, s := range []string{"-wal", "-shm"} {
		if err := os.Remove(e.healthy + s); err != nil {
			t.Fatal(err)
		}
	}

	wal, err := os.Open(filepath.Join(capture, "state.db-wal"))
	if err != nil {
		t.Fatal(err)
	}
	defer wal.Close()
	st, _ := wal.Stat()
	res, err := walsalvage.Salvage(context.Background(), wal, st.Size(), walsalvage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// 12 acknowledged commits; the tool turns (seq 5, 10) are two rows each.
	if res.Report.Rows.Messages != 14 || res.Report.Rows.Sessions != 1 || res.Report.Unrecoverable.Messages != 0 {
		t.Fatalf("salvage report %+v", res.Report)
	}

	req := e.request(capture, "inc-salvage", KindSidecarLost)
	req.ProfileHome = e.home
	rep, err := DivertSalvaged(context.Background(), req, res)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ReplayRows != 14 || rep.Sessions != 1 || len(rep.Files) != 1 || !rep.Files[0].NewSession || rep.Files[0].Session == nil {
		t.Fatalf("divert report %+v", rep)
	}
	if s := rep.Files[0].Session; s.Model.String != "test-model" || s.ProfileName.String != "test" {
		t.Fatalf("session template %+v, want the salvaged row's model and profile", s)
	}
	if n := e.replayAll(e.healthyWriter(), rep, false); n != 14 {
		t.Fatalf("replayed %d rows, want 14", n)
	}
	checkRows(t, readOnly(t, e.healthy), acks)

	again, err := DivertSalvaged(context.Background(), req, res)
	if err != nil || !again.Existing {
		t.Fatalf("second divert: %+v %v", again, err)
	}
}
