package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
)

func resolved(t *testing.T, db string) Store {
	t.Helper()
	s, err := ResolveStore(db)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The idle checkpoint writes a store only inside the directory discovery
// recorded: once that directory is renamed away and a look-alike holding
// hard links to the very same three inodes is put at its name (so every
// by-name identity check still passes), the checkpoint refuses with a
// directory-changed error and writes nothing: the -wal keeps its frames.
func TestCheckpointIdleOnlyInRecordedDir(t *testing.T) {
	tmp := realTemp(t)
	db := filepath.Join(mkdir(t, tmp, "alice"), "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 5, CheckpointEvery: -1, Linger: true})
	w.WaitAcks(t, 5)
	s := resolved(t, db)
	g, err := s.ReadGeneration()
	if err != nil || !g.WAL.Exists {
		t.Fatalf("generation %+v, %v", g, err)
	}
	aside := filepath.Join(tmp, "alice-aside")
	if err := os.Rename(filepath.Dir(db), aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Dir(db), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sfx := range []string{"", "-wal", "-shm"} {
		if err := os.Link(filepath.Join(aside, "state.db"+sfx), db+sfx); err != nil {
			t.Fatal(err)
		}
	}
	walBefore, err := os.Stat(db + "-wal")
	if err != nil || walBefore.Size() == 0 {
		t.Fatalf("-wal before: %v %v", walBefore, err)
	}
	if err := sameFiles(db, func(sfx string) (fileid.State, error) { return fileid.Lstat(db + sfx) }, g.IDs()); err != nil {
		t.Fatalf("the look-alike does not pass the by-name check, the test proves nothing: %v", err)
	}
	cp, err := s.CheckpointIdle(context.Background(), g.IDs())
	if !errors.Is(err, ErrDirChanged) {
		t.Fatalf("checkpoint through a look-alike directory = %+v, %v; want a directory-changed error", cp, err)
	}
	if fi, err := os.Stat(db + "-wal"); err != nil || fi.Size() != walBefore.Size() {
		t.Fatalf("-wal after the refused checkpoint: %v %v, want %d bytes untouched", fi, err, walBefore.Size())
	}
}

// Root removes an incident's snapshot only through the store directory's
// handle: after the directory is swapped for a symlink to another
// directory holding a file of that name, or for a look-alike holding one,
// RemoveFile refuses and both files stay; in the recorded directory it
// removes the file.
func TestRemoveFileOnlyInRecordedDir(t *testing.T) {
	for _, swap := range []string{"none", "symlink", "look-alike"} {
		t.Run(swap, func(t *testing.T) {
			tmp := realTemp(t)
			db := filepath.Join(mkdir(t, tmp, "alice"), "state.db")
			if err := hermestest.CreateStore(db); err != nil {
				t.Fatal(err)
			}
			snap := db + ".snapshot-inc1"
			other := filepath.Join(mkdir(t, tmp, "bob"), "state.db.snapshot-inc1")
			for _, p := range []string{snap, other} {
				if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s := resolved(t, db)
			keep := []string{other}
			switch swap {
			case "symlink", "look-alike":
				aside := filepath.Join(tmp, "alice-aside")
				if err := os.Rename(filepath.Dir(db), aside); err != nil {
					t.Fatal(err)
				}
				keep = append(keep, filepath.Join(aside, filepath.Base(snap)))
				if swap == "symlink" {
					if err := os.Symlink(filepath.Dir(other), filepath.Dir(db)); err != nil {
						t.Fatal(err)
					}
				} else {
					mkdir(t, tmp, "alice")
					if err := os.WriteFile(snap, []byte("y"), 0o600); err != nil {
						t.Fatal(err)
					}
					keep = append(keep, snap)
				}
			}
			err := s.RemoveFile(snap)
			if swap == "none" {
				if _, serr := os.Lstat(snap); err != nil || !os.IsNotExist(serr) {
					t.Fatalf("in the recorded directory: %v, %v", err, serr)
				}
			} else if !errors.Is(err, ErrDirChanged) && !errors.Is(err, ErrSymlinkInPath) {
				t.Fatalf("%s: %v, want a directory-changed or symlink refusal", swap, err)
			}
			for _, p := range keep {
				if _, err := os.Lstat(p); err != nil {
					t.Errorf("%s: %s removed: %v", swap, p, err)
				}
			}
		})
	}
}
