package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// The worker's generation read and its raw opens go through the store
// directory's handle: once the directory discovery recorded is swapped
// for a symlink to another store's directory, or renamed away and
// replaced by a look-alike holding another store, Store.ReadGeneration
// refuses it (every file Missing, a directory-changed error) and
// Store.OpenFile opens nothing, so the other store's inodes and headers
// never stand in for this one's. A swap after the handle is open (during
// the read) does not redirect it: it still reads the recorded directory.
func TestStoreGenerationGoesThroughDirHandle(t *testing.T) {
	tmp := realTemp(t)
	mine := filepath.Join(mkdir(t, tmp, "alice"), "state.db")
	other := filepath.Join(mkdir(t, tmp, "bob"), "state.db")
	for _, p := range []string{mine, other} {
		if err := hermestest.CreateStore(p); err != nil {
			t.Fatal(err)
		}
	}
	s, err := ResolveStore(mine)
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.ReadGeneration()
	if err != nil || !want.Main.Exists || !want.MainHeaderOK {
		t.Fatalf("the recorded directory: %+v, %v", want, err)
	}
	bob, err := ReadGeneration(other)
	if err != nil {
		t.Fatal(err)
	}
	if byName, _ := ReadGeneration(mine); byName.IDs() != want.IDs() {
		t.Fatalf("by handle %v, by name %v", want.IDs(), byName.IDs())
	}

	// During the read: the handle is open, then the directory is swapped.
	h, err := s.OpenDir()
	if err != nil {
		t.Fatal(err)
	}
	aside := filepath.Join(tmp, "alice-aside")
	if err := os.Rename(filepath.Dir(mine), aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(other), filepath.Dir(mine)); err != nil {
		t.Fatal(err)
	}
	during, err := h.ReadGeneration("state.db")
	h.Close()
	if err != nil || during.IDs() != want.IDs() {
		t.Fatalf("swapped during the read: read %v (%v), want the recorded directory's %v", during.IDs(), err, want.IDs())
	}

	check := func(what string) {
		t.Helper()
		g, err := s.ReadGeneration()
		if err == nil {
			t.Fatalf("%s: generation read without an error: %+v", what, g)
		}
		if !errors.Is(err, ErrDirChanged) && !errors.Is(err, ErrSymlinkInPath) {
			t.Errorf("%s: %v, want a directory-changed or symlink error", what, err)
		}
		if g.Main.Exists || g.WAL.Exists || g.SHM.Exists || g.IDs().Main == bob.Main.ID {
			t.Errorf("%s: the generation has files: %+v", what, g)
		}
		for _, sfx := range []string{"", "-wal", "-shm"} {
			if f, err := s.OpenFile(sfx); err == nil {
				id := fileid.Missing()
				if fi, serr := f.Stat(); serr == nil {
					id = fileid.Of(fi)
				}
				f.Close()
				t.Errorf("%s: OpenFile(%q) opened %v", what, sfx, id.ID)
			}
		}
	}
	check("symlink to bob's directory")

	// A look-alike: a real directory at the name, holding bob's store.
	if err := os.Remove(filepath.Dir(mine)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Dir(mine), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sfx := range []string{"", "-wal", "-shm"} {
		if err := os.Link(other+sfx, mine+sfx); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	check("look-alike directory")
}

// The path-taking entry points (ReadGeneration, ProbeFile: tests and
// operator tools) reach the store through a handle on its directory too:
// a directory component swapped for a symlink to a look-alike directory
// holding another store is refused, and that store is never read. By
// name (before), both followed the link and read bob's store as alice's.
func TestPathEntryPointsRefuseASymlinkedDirectory(t *testing.T) {
	tmp := realTemp(t)
	bob := filepath.Join(mkdir(t, tmp, "bob"), "state.db")
	if err := hermestest.CreateStore(bob); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(bob), filepath.Join(tmp, "alice")); err != nil {
		t.Fatal(err)
	}
	alice := filepath.Join(tmp, "alice", "state.db")
	if g, err := ReadGeneration(alice); !errors.Is(err, ErrSymlinkInPath) || g.Main.Exists {
		t.Errorf("ReadGeneration through a symlinked directory: main exists %v, %v; want %v", g.Main.Exists, err, ErrSymlinkInPath)
	}
	if s, err := ProbeFile(t.Context(), alice); !errors.Is(err, ErrSymlinkInPath) || s.Shape != "" {
		t.Errorf("ProbeFile through a symlinked directory: shape %q, %v; want %v", s.Shape, err, ErrSymlinkInPath)
	}
}
