//go:build linux

package recovery

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/store"
)

// FinishBackfill writes the shared main only through the store
// directory's handle. Through the directory discovery recorded it
// finishes the checkpoint (the main becomes SQLite's own checkpoint of
// it); once that directory is renamed away and its name made a symlink
// to it, or a look-alike directory holding a hard link to the very same
// main (so a by-name open passes the pinned-inode check), it refuses and
// the main keeps every byte.
func TestFinishBackfillOnlyInRecordedDir(t *testing.T) {
	for _, swap := range []string{"none", "symlink", "look-alike"} {
		t.Run(swap, func(t *testing.T) {
			s := newInterruptedStore(t, 1)
			st, err := store.ResolveStore(s.main)
			if err != nil {
				t.Fatal(err)
			}
			src := s.source(t)
			main := s.main
			if swap != "none" {
				aside := s.dir + "-aside"
				if err := os.Rename(s.dir, aside); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(aside) })
				main = filepath.Join(aside, "state.db")
				if swap == "symlink" {
					err = os.Symlink(aside, s.dir)
				} else if err = os.Mkdir(s.dir, 0o700); err == nil {
					err = os.Link(main, s.main)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			before := readAll(t, main)
			rep, err := FinishBackfill(context.Background(), st, src.Main, src.WAL, src.SHM)
			if swap == "none" {
				if err != nil || !rep.Interrupted || !bytes.Equal(readAll(t, main), s.oracle) {
					t.Fatalf("the recorded directory: %+v, %v (main is the oracle: %v)", rep, err, bytes.Equal(readAll(t, main), s.oracle))
				}
				return
			}
			if !errors.Is(err, store.ErrDirChanged) && !errors.Is(err, store.ErrSymlinkInPath) {
				t.Fatalf("%s: %+v, %v; want a directory-changed or symlink error", swap, rep, err)
			}
			if !bytes.Equal(readAll(t, main), before) {
				t.Fatalf("%s: the main was written although the directory was swapped", swap)
			}
		})
	}
}
