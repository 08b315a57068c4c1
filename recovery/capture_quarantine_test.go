//go:build linux

package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// sidecarStore makes a store with -wal and -shm files and returns their
// identities: the "old generation" a quarantine is asked to move.
func sidecarStore(t *testing.T) (string, map[string]fileid.ID) {
	t.Helper()
	db := hermestest.NewStore(t)
	ids := map[string]fileid.ID{}
	for _, s := range []string{"-wal", "-shm"} {
		if err := os.WriteFile(db+s, []byte("old generation "+s), 0o600); err != nil {
			t.Fatal(err)
		}
		ids[s] = statID(t, db+s)
	}
	return db, ids
}

// TestQuarantineMovesOnlyMatchingIdentities: a sidecar is renamed into the
// capture only while it is still the recorded inode; a replaced one stays.
func TestQuarantineMovesOnlyMatchingIdentities(t *testing.T) {
	db, ids := sidecarStore(t)
	// A new opener already replaced the -shm. The old one stays linked, as
	// its frozen holders keep it alive, so its inode is not reused.
	if err := os.Rename(db+"-shm", db+"-shm.old"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db+"-shm", []byte("new generation"), 0o600); err != nil {
		t.Fatal(err)
	}
	newSHM := statID(t, db+"-shm")

	staging, err := StageCapture(CaptureRequest{DBPath: db, PID: 5})
	if err != nil {
		t.Fatal(err)
	}
	moved, err := QuarantineSidecars(db, staging, ids)
	if !errors.Is(err, fileid.ErrIdentityChanged) || !strings.Contains(err.Error(), db+"-shm") {
		t.Fatalf("replaced -shm: %v", err)
	}
	if !slices.Equal(moved, []string{filepath.Join(staging, "state.db-wal")}) {
		t.Fatalf("moved %v", moved)
	}
	if statID(t, moved[0]) != ids["-wal"] {
		t.Fatal("the quarantined -wal is not the original inode")
	}
	if _, err := os.Lstat(db + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("-wal still at the path: %v", err)
	}
	if statID(t, db+"-shm") != newSHM {
		t.Fatal("the new generation's -shm was touched")
	}

	// Nothing asked, nothing moved; an absent sidecar is not an error.
	moved, err = QuarantineSidecars(db, staging, map[string]fileid.ID{"-wal": ids["-wal"]})
	if err != nil || len(moved) != 0 {
		t.Fatalf("second quarantine: %v %v", moved, err)
	}
}

// TestQuarantineIntoFinalCapture: a final capture that already has its
// copy of the -wal receives the original as state.db-wal.quarantined.
func TestQuarantineIntoFinalCapture(t *testing.T) {
	gen, _ := crashedGeneration(t, 3, true)
	src := openPinned(t, gen)
	db, ids := sidecarStore(t)
	c, err := WriteCapture(context.Background(), src, CaptureRequest{DBPath: db, PID: 6})
	if err != nil {
		t.Fatal(err)
	}
	moved, err := QuarantineSidecars(db, c.Dir, map[string]fileid.ID{"-wal": ids["-wal"]})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(moved, []string{filepath.Join(c.Dir, "state.db-wal.quarantined")}) || statID(t, moved[0]) != ids["-wal"] {
		t.Fatalf("moved %v", moved)
	}
	if _, err := OpenCapture(c.Dir); err != nil {
		t.Fatalf("the capture's own files were disturbed: %v", err)
	}
}

// TestQuarantineRefusesAnotherFilesystem: quarantine never copies.
func TestQuarantineRefusesAnotherFilesystem(t *testing.T) {
	db, ids := sidecarStore(t)
	other := filepath.Join(mountTmpfs(t, "size=1m,mode=0700"), "state.db.retired-wal-20261001-000000-1")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	moved, err := QuarantineSidecars(db, other, ids)
	if err == nil || !strings.Contains(err.Error(), "another filesystem") || len(moved) != 0 {
		t.Fatalf("cross-filesystem quarantine: %v %v", moved, err)
	}
	if statID(t, db+"-wal") != ids["-wal"] || statID(t, db+"-shm") != ids["-shm"] {
		t.Fatal("sidecars moved across filesystems")
	}
}

// TestCleanPartials removes only stateguard's staging dirs whose agent is
// gone and that hold no quarantined original.
func TestCleanPartials(t *testing.T) {
	db, ids := sidecarStore(t)
	dir := filepath.Dir(db)
	now := time.Date(2026, 10, 1, 7, 0, 0, 0, time.UTC)
	stage := func() string {
		p, err := StageCapture(CaptureRequest{DBPath: db, PID: 77, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphanMark := func(p string) {
		b, _ := json.Marshal(partialMark{AgentPID: dead.Process.Pid, Database: db})
		if err := os.WriteFile(filepath.Join(p, partialMarker), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	live := stage() // this process's: a capture in progress
	stale := stage()
	orphanMark(stale)
	if err := os.WriteFile(filepath.Join(stale, "state.db-wal"), []byte("half a copy"), 0o600); err != nil {
		t.Fatal(err)
	}
	held := stage()
	orphanMark(held)
	if _, err := QuarantineSidecars(db, held, ids); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "state.db.retired-wal-20261001-000000-1.partial")
	hermes := filepath.Join(dir, ".state.db.retired-wal-20261001-000000-1.4242.partial")
	for _, p := range []string{foreign, hermes} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}

	removed, err := CleanPartials(db, store.DirID{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{stale}) {
		t.Fatalf("removed %v, want only %s", removed, stale)
	}
	for _, p := range []string{live, held, foreign, hermes} {
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("%s was removed: %v", p, err)
		}
	}

	// The staging dir holding the quarantined originals is finished later:
	// they are adopted, not copied, and the staging files disappear.
	gen, _ := crashedGeneration(t, 3, true)
	src := openPinned(t, gen)
	c, err := WriteCapture(context.Background(), CaptureSource{Main: src.Main}, CaptureRequest{DBPath: db, PID: 77, Staging: held, Kind: KindMispaired})
	if err != nil {
		t.Fatal(err)
	}
	sg := c.Manifest.Stateguard
	if sg.Origins["state.db-wal"] != "quarantined" || sg.Origins["state.db-shm"] != "quarantined" || c.Manifest.WAL.Identity.ID() != ids["-wal"] {
		t.Fatalf("origins %v wal %+v", sg.Origins, c.Manifest.WAL)
	}
	if statID(t, filepath.Join(c.Dir, "state.db-wal")) != ids["-wal"] {
		t.Fatal("the quarantined -wal was copied, not adopted")
	}
	checkModes(t, c.Dir)
	if _, err := OpenCapture(c.Dir); err != nil {
		t.Fatal(err)
	}
}

// An agent killed while it copied the main into the staging directory
// that holds the quarantined sidecars leaves a half-written main there.
// The resumed capture replaces it (and keeps the quarantined originals);
// a chaos run retried it every 5 s with "file exists" instead,
// the orphan's writers frozen until the run ended.
func TestResumedCaptureReplacesHalfWrittenMain(t *testing.T) {
	db, ids := sidecarStore(t)
	held, err := StageCapture(CaptureRequest{DBPath: db, PID: 77, Now: time.Date(2026, 10, 1, 7, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := QuarantineSidecars(db, held, ids); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(held, "state.db"), []byte("half a main"), 0o600); err != nil {
		t.Fatal(err)
	}
	gen, _ := crashedGeneration(t, 3, true)
	src := openPinned(t, gen)
	c, err := WriteCapture(context.Background(), CaptureSource{Main: src.Main}, CaptureRequest{DBPath: db, PID: 77, Staging: held, Kind: KindMispaired})
	if err != nil {
		t.Fatalf("resumed capture: %v", err)
	}
	if statID(t, filepath.Join(c.Dir, "state.db-wal")) != ids["-wal"] {
		t.Fatal("the quarantined -wal was not adopted")
	}
	if _, err := OpenCapture(c.Dir); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(c.Dir, "state.db")); err != nil || st.Size() != c.Manifest.Main.Size {
		t.Fatalf("captured main: %v, want the whole main", err)
	}
}

// TestQuarantineRefusesALookAlikeDirectory: the store's directory is
// renamed aside and a look-alike put at its path, holding hard links to
// the recorded sidecars and a capture directory of the same name. The
// sidecars' identities match, so only the directory's recorded identity
// tells it is not the store's: the quarantine is refused and nothing is
// moved. Without the DirID compare (before), it moved them.
func TestQuarantineRefusesALookAlikeDirectory(t *testing.T) {
	db, ids := sidecarStore(t)
	h, err := store.OpenDir(filepath.Dir(db), store.DirID{})
	if err != nil {
		t.Fatal(err)
	}
	recorded := h.ID()
	h.Close()
	staging, err := StageCapture(CaptureRequest{DBPath: db, PID: 5})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(db)
	aside := dir + ".aside"
	if err := os.Rename(dir, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, sfx := range []string{"-wal", "-shm"} {
		if err := os.Link(filepath.Join(aside, filepath.Base(db)+sfx), db+sfx); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(staging, 0o700); err != nil {
		t.Fatal(err)
	}
	moved, err := QuarantineSidecarsIn(db, recorded, staging, ids)
	if !errors.Is(err, store.ErrDirChanged) || len(moved) != 0 {
		t.Fatalf("quarantine in a look-alike directory: moved %v, %v; want nothing and %v", moved, err, store.ErrDirChanged)
	}
	for _, sfx := range []string{"-wal", "-shm"} {
		if statID(t, db+sfx) != ids[sfx] {
			t.Fatalf("the look-alike's %s was touched", sfx)
		}
	}
}

// TestSnapshotMainRefusesALookAlikeDirectory: the store's directory is
// renamed aside and a look-alike put at its path with the same main (a
// hard link): the fd and the path agree on the inode, so only the
// directory's recorded identity tells it is not the store's. The snapshot
// is refused and not written. By name (before), it was taken.
func TestSnapshotMainRefusesALookAlikeDirectory(t *testing.T) {
	db := hermestest.NewStore(t)
	h, err := store.OpenDir(filepath.Dir(db), store.DirID{})
	if err != nil {
		t.Fatal(err)
	}
	recorded := h.ID()
	h.Close()
	main, err := os.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer main.Close()
	dir := filepath.Dir(db)
	aside := dir + ".aside"
	if err := os.Rename(dir, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(aside, filepath.Base(db)), db); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "snapshot")
	if err := SnapshotMainIn(context.Background(), db, recorded, main, snap); !errors.Is(err, store.ErrDirChanged) {
		t.Fatalf("snapshot through a look-alike directory: %v, want %v", err, store.ErrDirChanged)
	}
	if _, err := os.Lstat(snap); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused snapshot left %s: %v", snap, err)
	}
}
