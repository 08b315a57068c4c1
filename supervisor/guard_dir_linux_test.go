package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// The guard opens a store's files by name, but arms only inside the
// directory discovery recorded: with the profile directory swapped for a
// symlink to another store's (held open, -shm there), or for a look-alike
// holding that store, arming fails naming the directory and the other
// store gets no lock of the agent's; in the real directory it arms.
func TestGuardArmsOnlyInRecordedDir(t *testing.T) {
	home, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(home, "profiles", "p", "state.db")
	other := filepath.Join(home, "elsewhere", "state.db")
	for _, db := range []string{filepath.Join(home, "state.db"), mine, other} {
		if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := hermestest.CreateStore(db); err != nil {
			t.Fatal(err)
		}
	}
	a := startAgent(t, home, nil) // guard off: only this test arms
	hermestest.StartWriter(t, hermestest.WriterOptions{DB: mine, Rate: 20, CheckpointEvery: -1})
	hermestest.StartWriter(t, hermestest.WriterOptions{DB: other, Rate: 20, CheckpointEvery: -1})
	hermestest.Eventually(t, "the worker for the profile", 30*time.Second, func() bool { return a.worker(mine) != nil })
	w := a.worker(mine)
	arm := func() error {
		g := byNameGeneration(t, mine) // as a by-name lstat sees it
		// Called from here: armGuardChecked reads only w.st, set at the
		// worker's creation, and a rescan may have retired this worker
		// (a look-alike directory gets a new one).
		gd, err := w.armGuardChecked(g.IDs())
		if err == nil {
			gd.Close()
		}
		return err
	}
	if err := arm(); err != nil {
		t.Fatalf("real directory: %v", err)
	}
	otherIDs := func() (main, shm fileid.ID) { return fileID(t, other), fileID(t, other+"-shm") }
	dir := filepath.Dir(mine)
	if err := os.Rename(dir, dir+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(other), dir); err != nil {
		t.Fatal(err)
	}
	if err := arm(); !errors.Is(err, store.ErrSymlinkInPath) {
		t.Errorf("profile dir swapped for a symlink: arm = %v, want ErrSymlinkInPath", err)
	}
	if m, s := otherIDs(); len(ofdLocks(t, m)) > 0 && guarded(t, m, s) {
		t.Error("the other store was locked by the agent's guard")
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, sfx := range []string{"", "-wal", "-shm"} {
		if err := os.Link(other+sfx, mine+sfx); err != nil {
			t.Fatal(err)
		}
	}
	if err := arm(); !errors.Is(err, store.ErrDirChanged) {
		t.Errorf("look-alike directory: arm = %v, want ErrDirChanged", err)
	}
	if m, s := otherIDs(); guarded(t, m, s) {
		t.Error("the other store was locked by the agent's guard")
	}
}
