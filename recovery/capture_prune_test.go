//go:build unix

package recovery

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/store"
)

// RemoveCapture gives back a finished capture's space and nothing else:
// what is not a capture of the store, by name or by shape, is refused and
// left as it is, and a link is never followed.
func TestRemoveCaptureOnlyRemovesCaptures(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	if err := os.WriteFile(db, []byte("main"), 0o600); err != nil {
		t.Fatal(err)
	}
	st := store.Store{Path: db, Kind: store.Hermes}
	capture := func(name string, files ...string) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(p, f), make([]byte, 8192), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}

	done := capture("state.db.retired-wal-20261206-040912-15037", ManifestName, "state.db", "state.db-wal")
	freed, err := RemoveCapture(st, done)
	if err != nil || freed < 3*8192 {
		t.Fatalf("finished capture: freed %d, %v", freed, err)
	}
	if _, err := os.Lstat(done); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("finished capture still there: %v", err)
	}
	if freed, err := RemoveCapture(st, done); !errors.Is(err, os.ErrNotExist) || freed != 0 {
		t.Fatalf("capture removed already: freed %d, %v; want 0, ErrNotExist", freed, err)
	}

	elsewhere := t.TempDir()
	if err := os.WriteFile(filepath.Join(elsewhere, ManifestName), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "state.db.retired-wal-20261206-040913-1")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	nested := capture("state.db.retired-wal-20261206-040914-2", ManifestName)
	if err := os.Mkdir(filepath.Join(nested, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"a link to a directory":  link,
		"no manifest":            capture("state.db.retired-wal-20261206-040915-3", "state.db"),
		"a subdirectory inside":  nested,
		"still being written":    capture("state.db.retired-wal-20261206-040916-4.partial", ManifestName),
		"not named as a capture": capture("sessions", ManifestName),
		"another store's":        capture("other.db.retired-wal-20261206-040917-5", ManifestName),
	} {
		if _, err := RemoveCapture(st, path); !errors.Is(err, ErrNotACapture) {
			t.Errorf("%s: %v, want ErrNotACapture", name, err)
		}
		if _, err := os.Lstat(path); err != nil {
			t.Errorf("%s: removed although refused: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(elsewhere, ManifestName)); err != nil {
		t.Fatalf("the link's target was touched: %v", err)
	}
}
