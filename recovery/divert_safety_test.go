//go:build linux

package recovery

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// TestDivertIdempotent: a second run returns the same report and
// rewrites nothing; another kind is refused; a changed file is reported;
// an interrupted staging directory is cleaned up.
func TestDivertIdempotent(t *testing.T) {
	e, capture := sidecarLostEnv(t)
	req := e.request(capture, "inc-1", KindSidecarLost)
	first := e.divert(req)
	before := map[string]fileStamp{}
	for _, f := range first.Files {
		before[f.Path] = stamp(t, f.Path)
	}
	manifest := filepath.Join(first.Dir, DivertManifestName)
	mstamp := stamp(t, manifest)

	second := e.divert(req)
	if !second.Existing {
		t.Fatal("second run did not find the first divert")
	}
	second.Existing = false
	if !reflect.DeepEqual(normalized(first), normalized(second)) {
		t.Fatalf("reports differ:\n%+v\n%+v", first, second)
	}
	for p, s := range before {
		if stamp(t, p) != s {
			t.Fatalf("%s rewritten", p)
		}
	}
	if stamp(t, manifest) != mstamp {
		t.Fatal("divert.json rewritten")
	}
	if got, err := ReadDivert(first.Dir); err != nil || len(got.Files) != len(first.Files) {
		t.Fatalf("ReadDivert: %v %+v", err, got)
	}
	for _, f := range first.Files {
		got, ok, err := DivertSessionFor(f.Path)
		if err != nil || !ok || got.SessionID != f.SessionID || (got.Session == nil) != (f.Session == nil) {
			t.Fatalf("DivertSessionFor(%s): %+v %v %v", f.Path, got, ok, err)
		}
	}

	other := req
	other.Kind = KindReplaced
	other.ReplacedAt = time.Unix(1500, 0)
	if _, err := Divert(context.Background(), other); !errors.Is(err, ErrDivertMismatch) {
		t.Fatalf("divert with another kind: %v", err)
	}

	// A crash before publishing leaves only the staging directory; the
	// next run replaces it and publishes a complete divert.
	req2 := e.request(capture, "inc-2", KindSidecarLost)
	staging := filepath.Join(filepath.Dir(first.Dir), ".inc-2"+divertStagingSuffix)
	if err := os.Mkdir(staging, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, "s1.jsonl"), []byte(`{"role": "user", "con`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDivert(staging); !errors.Is(err, ErrDivertDamaged) {
		t.Fatalf("a staging directory reads as a divert: %v", err)
	}
	rep2 := e.divert(req2)
	if rep2.Existing || len(rep2.Files) != 2 {
		t.Fatalf("after a crash: %+v", rep2)
	}
	if _, err := os.Lstat(staging); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("staging left: %v", err)
	}

	// A file changed after the divert is not silently used again.
	if err := os.WriteFile(first.Files[0].Path, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Divert(context.Background(), req); !errors.Is(err, ErrDivertDamaged) {
		t.Fatalf("divert over a changed file: %v", err)
	}
}

// normalized drops what legitimately differs between a written report
// and one read back (time zone of ReplacedAt).
func normalized(r DivertReport) DivertReport {
	r.ReplacedAt = r.ReplacedAt.UTC()
	return r
}

func TestDivertRefusesUnsafeDirs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, home, elsewhere string)
	}{
		{"symlinked sessions", func(t *testing.T, home, elsewhere string) {
			if err := os.Symlink(elsewhere, filepath.Join(home, "sessions")); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlinked recovered", func(t *testing.T, home, elsewhere string) {
			if err := os.Mkdir(filepath.Join(home, "sessions"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(elsewhere, filepath.Join(home, "sessions", "recovered")); err != nil {
				t.Fatal(err)
			}
		}},
		{"sessions writable by others", func(t *testing.T, home, elsewhere string) {
			p := filepath.Join(home, "sessions")
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, 0o777); err != nil {
				t.Fatal(err)
			}
		}},
		{"home writable by others", func(t *testing.T, home, elsewhere string) {
			if err := os.Chmod(home, 0o777); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newDivertEnv(t)
			e.orphan.session("s1", "cli", 1)
			e.orphan.checkpoint()
			e.orphan.copyMainTo(e.healthy)
			e.orphan.add("s1", "user", "lost", 2)
			capture := e.orphan.capture(KindSidecarLost, "inc-u")
			elsewhere := filepath.Join(e.dir, "elsewhere")
			if err := os.Mkdir(elsewhere, 0o700); err != nil {
				t.Fatal(err)
			}
			tc.plant(t, e.home, elsewhere)
			_, err := Divert(context.Background(), e.request(capture, "inc-u", KindSidecarLost))
			if !errors.Is(err, ErrUnsafeDir) {
				t.Fatalf("divert: %v, want ErrUnsafeDir", err)
			}
			if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
				t.Fatalf("wrote through the link: %v", ents)
			}
		})
	}
}

// TestDivertHermesCapture: a capture Hermes wrote diverts like ours. The
// healthy store has the fixture's first two rows; its session is missing
// from neither, so only the last three rows are written.
func TestDivertHermesCapture(t *testing.T) {
	e := newDivertEnv(t)
	fixture, err := filepath.Abs(hermesFixture)
	if err != nil {
		t.Fatal(err)
	}
	capDB := openCaptureCopy(t, fixture)
	ms, err := store.ReadMessages(context.Background(), capDB, "s1")
	if err != nil || len(ms) != hermesFixtureRows {
		t.Fatalf("fixture: %d rows, %v", len(ms), err)
	}
	if err := hermestest.CreateStore(e.healthy); err != nil {
		t.Fatal(err)
	}
	w := e.healthyWriter()
	err = w.InTx(context.Background(), func(tx *store.Tx) error {
		if err := tx.CreateSession(store.Session{ID: "s1", Source: "cli"}); err != nil {
			return err
		}
		for _, m := range ms[:2] {
			m.ID = 0
			if _, err := tx.AppendMessage(m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	before := stamp(t, filepath.Join(fixture, "state.db-wal"))

	rep := e.divert(e.request(fixture, "hermes-1", KindSidecarLost))
	if len(rep.Files) != 1 || rep.Files[0].Rows != 3 || rep.Files[0].NewSession || rep.CaptureRows != 5 || rep.HealthyRows != 2 {
		t.Fatalf("report: %+v", rep)
	}
	if n := e.replayAll(w, rep, false); n != 3 {
		t.Fatalf("replay appended %d", n)
	}
	if c, h := keysOf(t, capDB, "s1"), keysOf(t, w, "s1"); !reflect.DeepEqual(c, h) {
		t.Fatalf("capture %v\nhealthy %v", c, h)
	}
	if stamp(t, filepath.Join(fixture, "state.db-wal")) != before {
		t.Fatal("the fixture capture was modified")
	}
	if ents, _ := os.ReadDir(fixture); len(ents) != 4 {
		t.Fatalf("the fixture capture gained files: %v", ents)
	}

	// Into a fresh store the session is created from the capture's row.
	e2 := newDivertEnv(t)
	if err := hermestest.CreateStore(e2.healthy); err != nil {
		t.Fatal(err)
	}
	rep2 := e2.divert(e2.request(fixture, "hermes-2", KindSidecarLost))
	f := rep2.Files[0]
	if !f.NewSession || f.Session == nil || f.Session.Source != "cli" || f.Session.Model.String != "test-model" || f.Rows != 5 {
		t.Fatalf("fresh store: %+v session %+v", f, f.Session)
	}
}

// TestDivertWriterGeneration is the sidecar_lost incident with the real
// writer: its rows (tool turns among them) live only in a WAL that is
// lost to the healthy store, which keeps only the main. After divert,
// replay and replay again, every acknowledged row is in the healthy store
// exactly once and the store is sound.
func TestDivertWriterGeneration(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	orphanDir := filepath.Join(dir, "orphan")
	home := filepath.Join(dir, "home")
	for _, d := range []string{orphanDir, home} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	db := filepath.Join(orphanDir, "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 60, ToolEvery: 4, Linger: true, CheckpointEvery: -1})
	acks := w.WaitAcks(t, 60)
	stopWriter(t, w)()
	healthy := filepath.Join(home, "state.db")
	hermestest.CopyFile(t, db, healthy, 0o600) // the main without its WAL: schema only
	c, err := WriteCapture(context.Background(), openPinned(t, db), CaptureRequest{DBPath: db, PID: w.Pid, Kind: KindSidecarLost, IncidentID: "inc-w"})
	if err != nil {
		t.Fatal(err)
	}

	rep, err := Divert(context.Background(), DivertRequest{Capture: c.Dir, Store: healthy, IncidentID: "inc-w", Kind: KindSidecarLost, TmpDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Files) != 1 || !rep.Files[0].NewSession || rep.Files[0].Session == nil || rep.Unreplayable != 0 {
		t.Fatalf("report: %+v", rep)
	}
	sw, err := store.OpenWritable(context.Background(), healthy)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		for _, f := range rep.ReplayFiles(false) {
			if _, err := Replay(context.Background(), sw, f.Path, f.ReplayOptions()); err != nil {
				t.Fatal(err)
			}
		}
	}
	var rows int
	if err := sw.InTx(context.Background(), func(tx *store.Tx) error {
		ms, err := store.ReadMessages(tx.Context(), tx, "s1")
		rows = len(ms)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	sw.Close()
	if rows != rep.CaptureRows {
		t.Fatalf("healthy store has %d rows, the capture %d", rows, rep.CaptureRows)
	}
	checkRows(t, hermestest.OpenDB(t, "file:"+healthy+"?mode=ro"), acks)
	checkIntegrity(t, healthy)
	s, err := store.ReadSession(context.Background(), readOnly(t, healthy), "s1")
	if err != nil || s.Model.String != "test-model" || s.ProfileName.String != "test" {
		t.Fatalf("session created as %+v: %v", s, err)
	}
}

// TestReadDivertRefusesASymlinkedComponent: the directory that holds the
// incident's divert (sessions/recovered) is swapped for a symlink to a
// look-alike copy of it, same files, same sums. Reading the divert, or
// finding a file's session in it, is refused: no symlink in any
// component, everything read through the directory's handle. By name
// (before), both read the copy as the incident's divert.
func TestReadDivertRefusesASymlinkedComponent(t *testing.T) {
	e, capture := sidecarLostEnv(t)
	first := e.divert(e.request(capture, "inc-1", KindSidecarLost))
	recovered := filepath.Dir(first.Dir)
	copyDir := recovered + ".copy"
	if out, err := exec.Command("cp", "-a", recovered, copyDir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if err := os.Rename(recovered, recovered+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(copyDir, recovered); err != nil {
		t.Fatal(err)
	}
	if rep, err := ReadDivert(first.Dir); !errors.Is(err, store.ErrSymlinkInPath) {
		t.Errorf("ReadDivert through a symlinked directory: %d files, %v; want %v", len(rep.Files), err, store.ErrSymlinkInPath)
	}
	if len(first.Files) == 0 {
		t.Fatal("the divert wrote no file: the test proves nothing")
	}
	if f, ok, err := DivertSessionFor(first.Files[0].Path); ok || !errors.Is(err, store.ErrSymlinkInPath) {
		t.Errorf("DivertSessionFor through a symlinked directory: %+v %v %v; want %v", f, ok, err, store.ErrSymlinkInPath)
	}
}
