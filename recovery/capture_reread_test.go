//go:build linux

package recovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/store"
)

// The divert re-reads a capture it wrote only through a handle on the
// capture's directory: a symlink anywhere in the capture's path makes the
// agent's divert refuse before it reads or writes anything (nothing in
// sessions/recovered), and a capture directory swapped for a look-alike
// (another capture, valid manifest and all) after it was validated is
// refused at the next read, not read. An operator's path (OpenCapture)
// has its parent's symlinks resolved once, and still works.
func TestCaptureRereadGoesThroughDirHandle(t *testing.T) {
	e, capture := sidecarLostEnv(t)
	ctx := context.Background()

	link := filepath.Join(e.dir, "link")
	if err := os.Symlink(filepath.Dir(capture), link); err != nil {
		t.Fatal(err)
	}
	linked := filepath.Join(link, filepath.Base(capture))
	_, err := Divert(ctx, e.request(linked, "inc-1", KindSidecarLost))
	if !errors.Is(err, store.ErrSymlinkInPath) {
		t.Fatalf("divert of a capture reached through a symlink: %v, want a symlink-in-path refusal", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.home, "sessions", "recovered")); len(ents) > 0 {
		t.Fatalf("the refused divert wrote under the profile: %v", ents)
	}
	if _, err := OpenCapture(linked); err != nil {
		t.Fatalf("an operator's path through a symlinked parent: %v", err)
	}

	// Validated, then swapped for a look-alike copy of itself.
	info, err := openCapture(ctx, capture, true)
	if err != nil {
		t.Fatal(err)
	}
	aside := capture + ".aside"
	if err := os.Rename(capture, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(capture, 0o700); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(aside)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		b, err := os.ReadFile(filepath.Join(aside, ent.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(capture, ent.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{info.Main, info.WAL} {
		if f, err := info.open(p); !errors.Is(err, store.ErrDirChanged) {
			if f != nil {
				f.Close()
			}
			t.Fatalf("%s read after its directory was swapped: %v, want a directory-changed error", p, err)
		}
	}
}
