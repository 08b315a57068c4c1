package supervisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// lockExclusive starts sqlite3 holding db's main EXCLUSIVE (WAL mode,
// locking_mode=EXCLUSIVE, a write transaction open) and returns its pid.
func lockExclusive(t *testing.T, db string) int {
	t.Helper()
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Skip("sqlite3 not installed (.ci/run installs it)")
	}
	cmd := exec.Command("sqlite3", db)
	in, out := hermestest.StartPiped(t, cmd)
	if _, err := in.Write([]byte("PRAGMA locking_mode=EXCLUSIVE;\nBEGIN EXCLUSIVE;\nCREATE TABLE IF NOT EXISTS t(x);\nSELECT 'locked';\n")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"exclusive", "locked"} {
		if l := hermestest.FirstLine(t, "sqlite3", out, 10*time.Second); l != want {
			t.Fatalf("sqlite3 said %q, want %q", l, want)
		}
	}
	return cmd.Process.Pid
}

// closingPid, in the fast freeze's path, reaches the main only through the
// profile directory's handle: a profile directory swapped for a symlink to
// another user's, or renamed away and replaced by a look-alike, gives no
// pid (the other store's locker is never taken for this store's closer),
// while the real directory gives its locker.
func TestClosingPidGoesThroughDirHandle(t *testing.T) {
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mk := func(name string) string {
		db := filepath.Join(tmp, name, "state.db")
		if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := hermestest.CreateStore(db); err != nil {
			t.Fatal(err)
		}
		return db
	}
	mine, other := mk("alice"), mk("bob")
	h, err := store.OpenDir(filepath.Dir(mine), store.DirID{})
	if err != nil {
		t.Fatal(err)
	}
	s := store.Store{Path: mine, DirID: h.ID()}
	h.Close()
	pidMine := lockExclusive(t, mine)
	pidOther := lockExclusive(t, other)
	gen := func() store.Generation {
		return byNameGeneration(t, mine) // as a by-name lstat sees it
	}
	if got := closingPid(s, gen()); got != pidMine {
		t.Fatalf("real directory: closingPid = %d, want the locker %d", got, pidMine)
	}
	// The profile directory becomes a symlink to bob's.
	aside := filepath.Join(tmp, "alice.real")
	if err := os.Rename(filepath.Dir(mine), aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(other), filepath.Dir(mine)); err != nil {
		t.Fatal(err)
	}
	if g := gen(); !g.Main.Exists {
		t.Fatal("the symlinked path shows no main: the attack did not take")
	} else if got := closingPid(s, g); got != 0 {
		t.Fatalf("profile dir is a symlink to another store: closingPid = %d (bob's locker is %d), want 0", got, pidOther)
	}
	// A real directory of the same name holding bob's store (hardlinked).
	if err := os.Remove(filepath.Dir(mine)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Dir(mine), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(other, mine); err != nil {
		t.Fatal(err)
	}
	if got := closingPid(s, gen()); got != 0 {
		t.Fatalf("look-alike directory: closingPid = %d (bob's locker is %d), want 0", got, pidOther)
	}
}
