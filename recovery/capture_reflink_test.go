//go:build linux

package recovery

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// TestCaptureReflink: on a filesystem with reflinks every file of the
// capture, and of its private copy, is a clone, and the capture is sound.
func TestCaptureReflink(t *testing.T) {
	fs := mountBtrfs(t)
	gen, acks := crashedGeneration(t, 20, true)
	orphan := filepath.Join(fs, "orphan")
	store := filepath.Join(fs, "store")
	for _, d := range []string{orphan, store} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(gen + s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(orphan, "state.db"+s), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	src := openPinned(t, filepath.Join(orphan, "state.db"))
	c, err := WriteCapture(context.Background(), src, CaptureRequest{DBPath: filepath.Join(store, "state.db"), PID: 13})
	if err != nil {
		t.Fatal(err)
	}
	o := c.Manifest.Stateguard.Origins
	if !c.Reflinked || o["state.db"] != "reflink" || o["state.db-wal"] != "reflink" || o["state.db-shm"] != "reflink" {
		t.Fatalf("reflinked=%v origins %v", c.Reflinked, o)
	}
	checkHashes(t, c.Dir, c.Manifest)
	p, err := PrivateCopy(context.Background(), c.Dir, fs)
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, hermestest.OpenDB(t, "file:"+p), acks)
}
