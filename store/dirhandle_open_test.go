package store

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// A store resolved once (ResolveStore, or discovery) is opened only
// through a handle on that directory: after the directory is swapped for
// a symlink to another store's, or renamed away and replaced by a
// look-alike holding another store, both opens refuse and touch neither
// store; a state.db owned by another user than its directory is refused.
func TestStoreOpensGoThroughDirHandle(t *testing.T) {
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
	ctx := context.Background()
	open := func() (errW, errR error) {
		w, errW := s.OpenWritable(ctx)
		if errW == nil {
			w.Close()
		}
		db, errR := s.OpenReadOnly()
		if errR == nil {
			errR = db.PingContext(ctx)
			db.Close()
		}
		return errW, errR
	}
	if ew, er := open(); ew != nil || er != nil {
		t.Fatalf("the resolved directory: %v / %v", ew, er)
	}
	dir := filepath.Dir(mine)
	if err := os.Rename(dir, dir+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(other), dir); err != nil {
		t.Fatal(err)
	}
	if ew, er := open(); !errors.Is(ew, ErrSymlinkInPath) || !errors.Is(er, ErrSymlinkInPath) {
		t.Errorf("directory swapped for a symlink: %v / %v, want ErrSymlinkInPath", ew, er)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	mkdir(t, dir)
	if err := os.Link(other, mine); err != nil {
		t.Fatal(err)
	}
	if ew, er := open(); !errors.Is(ew, ErrDirChanged) || !errors.Is(er, ErrDirChanged) {
		t.Errorf("look-alike directory: %v / %v, want ErrDirChanged", ew, er)
	}
	if _, err := os.Stat(other + "-wal"); err == nil {
		t.Error("the other store got a -wal: it was opened")
	}
	// Back to the real directory; its state.db given to another user.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir+".real", dir); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(mine, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		if ew, er := open(); !errors.Is(ew, ErrForeignOwner) || !errors.Is(er, ErrForeignOwner) {
			t.Errorf("state.db of another user: %v / %v, want ErrForeignOwner", ew, er)
		}
	}
}

// A directory on the way swapped for a symlink to another user's
// directory while SQLite opens the store, and swapped back before the
// second check, is still caught: SQLite resolved the link when it opened
// the file, so the name it opened is not the store's. Both opens refuse,
// and neither returns a connection to the other store.
func TestOpenSQLiteInCatchesASwapDuringTheOpen(t *testing.T) {
	tmp := realTemp(t)
	alice := mkdir(t, tmp, "alice")
	bob := mkdir(t, tmp, "bob")
	for _, d := range []string{alice, bob} {
		if err := hermestest.CreateStore(filepath.Join(d, "state.db")); err != nil {
			t.Fatal(err)
		}
	}
	s, err := ResolveStore(filepath.Join(alice, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	// swapped runs open with alice's directory a symlink to bob's, then
	// puts her directory back.
	swapped := func(open func() error) error {
		aside := alice + ".aside"
		if err := os.Rename(alice, aside); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(bob, alice); err != nil {
			t.Fatal(err)
		}
		err := open()
		if err := os.Remove(alice); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(aside, alice); err != nil {
			t.Fatal(err)
		}
		return err
	}
	ctx := context.Background()
	_, err = OpenSQLiteIn(s.Dir(), s.DirID, "state.db", func(p string) (*sql.DB, error) {
		var db *sql.DB
		return db, swapped(func() (err error) {
			if db, err = OpenReadOnly(p); err == nil {
				err = db.PingContext(ctx) // SQLite opens the file now
			}
			return err
		})
	})
	if !errors.Is(err, fileid.ErrIdentityChanged) {
		t.Errorf("read-only open with the directory swapped during it: %v, want %v", err, fileid.ErrIdentityChanged)
	}
	_, err = OpenSQLiteIn(s.Dir(), s.DirID, "state.db", func(p string) (*Writable, error) {
		var w *Writable
		return w, swapped(func() (err error) {
			w, err = OpenWritable(ctx, p)
			return err
		})
	})
	if !errors.Is(err, fileid.ErrIdentityChanged) {
		t.Errorf("writable open with the directory swapped during it: %v, want %v", err, fileid.ErrIdentityChanged)
	}
	// Unswapped, both open.
	db, err := s.OpenReadOnly()
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	w, err := s.OpenWritable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
}
