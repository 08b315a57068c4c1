//go:build linux

package recovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/store"
)

// TestCaptureRefusesUnsafeStoreDir: a directory others may write to, a
// symlinked store directory and a symlinked store file are refused before
// anything is written, with the fix in the message.
func TestCaptureRefusesUnsafeStoreDir(t *testing.T) {
	gen, _ := crashedGeneration(t, 3, true)
	src := openPinned(t, gen)
	ctx := context.Background()

	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := WriteCapture(ctx, src, CaptureRequest{DBPath: filepath.Join(open, "state.db"), PID: 42})
	if !errors.Is(err, ErrUnsafeDir) || !strings.Contains(err.Error(), "chmod o-w "+open) {
		t.Fatalf("world-writable dir: %v", err)
	}
	if _, err := StageCapture(CaptureRequest{DBPath: filepath.Join(open, "state.db"), PID: 42}); !errors.Is(err, ErrUnsafeDir) {
		t.Fatalf("StageCapture in a world-writable dir: %v", err)
	}

	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "home")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	_, err = WriteCapture(ctx, src, CaptureRequest{DBPath: filepath.Join(link, "state.db"), PID: 42})
	if !errors.Is(err, ErrUnsafeDir) || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("symlinked dir: %v", err)
	}

	// A symlink further up (profiles/ swapped for a link to someone
	// else's) is refused the same way: no component is followed.
	if err := os.MkdirAll(filepath.Join(real, "p"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err = WriteCapture(ctx, src, CaptureRequest{DBPath: filepath.Join(link, "p", "state.db"), PID: 42})
	if !errors.Is(err, ErrUnsafeDir) || !errors.Is(err, store.ErrSymlinkInPath) {
		t.Fatalf("symlink above the store dir: %v", err)
	}
	// A directory that is not the one discovery recorded is refused and
	// nothing is written in it.
	other := t.TempDir()
	recorded := store.DirID{ID: fileid.ID{Dev: 1, Ino: 2}, UID: os.Geteuid(), GID: os.Getegid()}
	_, err = WriteCapture(ctx, src, CaptureRequest{DBPath: filepath.Join(other, "state.db"), PID: 42, Dir: recorded})
	var dc *store.DirChangedError
	if !errors.As(err, &dc) || dc.Path != other {
		t.Fatalf("capture into a directory other than the recorded one: %v", err)
	}
	if ents, _ := os.ReadDir(other); len(ents) != 0 {
		t.Fatalf("written into the refused directory: %v", ents)
	}

	if err := os.WriteFile(filepath.Join(real, "elsewhere.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("elsewhere.db", filepath.Join(real, "state.db")); err != nil {
		t.Fatal(err)
	}
	_, err = WriteCapture(ctx, src, CaptureRequest{DBPath: filepath.Join(real, "state.db"), PID: 42})
	if !errors.Is(err, ErrUnsafeDir) {
		t.Fatalf("symlinked store file: %v", err)
	}
	for _, d := range []string{open, real} {
		if left := retiredDirs(t, d); len(left) != 0 {
			t.Fatalf("refused capture left %v in %s", left, d)
		}
	}
}

// TestCaptureNameCollision: the -n suffix skips both finished captures and
// staging directories of the same second and pid.
func TestCaptureNameCollision(t *testing.T) {
	gen, _ := crashedGeneration(t, 3, true)
	src := openPinned(t, gen)
	dir := t.TempDir()
	req := CaptureRequest{DBPath: filepath.Join(dir, "state.db"), PID: 3624811, Now: time.Date(2026, 10, 1, 7, 24, 48, 0, time.UTC)}
	stem := "state.db.retired-wal-20261001-072448-3624811"
	// Someone else's capture and an interrupted staging dir already exist.
	for _, d := range []string{stem, stem + "-1.partial"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for range 2 {
		c, err := WriteCapture(context.Background(), src, req)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, filepath.Base(c.Dir))
	}
	if got[0] != stem+"-2" || got[1] != stem+"-3" {
		t.Fatalf("captures named %v, want -2 and -3", got)
	}
	// The foreign directories were not touched.
	for _, d := range []string{stem, stem + "-1.partial"} {
		if ents, err := os.ReadDir(filepath.Join(dir, d)); err != nil || len(ents) != 0 {
			t.Fatalf("%s: %v %v", d, ents, err)
		}
	}
}

// TestCaptureBudget: over budget, nothing is written and the error says
// how many bytes are needed and where.
func TestCaptureBudget(t *testing.T) {
	gen, _ := crashedGeneration(t, 3, true)
	src := openPinned(t, gen)
	dir := t.TempDir()
	_, err := WriteCapture(context.Background(), src, CaptureRequest{DBPath: filepath.Join(dir, "state.db"), PID: 7, MaxBytes: 4096})
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "needs ") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("over budget: %v", err)
	}
	if left := retiredDirs(t, dir); len(left) != 0 {
		t.Fatalf("over-budget capture left %v", left)
	}
	// Within the budget it works.
	if _, err := WriteCapture(context.Background(), src, CaptureRequest{DBPath: filepath.Join(dir, "state.db"), PID: 7, MaxBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
}

// TestCaptureNoSpace uses real full filesystems: a tmpfs too small for the
// capture (refused by the free-space check before writing), and one whose
// inodes run out mid-capture (a real ENOSPC from the kernel), after which
// the staging directory must be gone.
func TestCaptureNoSpace(t *testing.T) {
	gen, _ := crashedGeneration(t, 20, true)
	src := openPinned(t, gen)

	small := mountTmpfs(t, "size=1m,mode=0700")
	_, err := WriteCapture(context.Background(), src, CaptureRequest{DBPath: filepath.Join(small, "state.db"), PID: 9})
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), small) {
		t.Fatalf("small tmpfs: %v", err)
	}
	if ents, _ := os.ReadDir(small); len(ents) != 0 {
		t.Fatalf("small tmpfs holds %d entries after a refused capture", len(ents))
	}

	// Root, the staging dir, its marker and the WAL copy use the four
	// inodes: the next file then fails with ENOSPC.
	few := mountTmpfs(t, "size=64m,nr_inodes=4,mode=0700")
	_, err = WriteCapture(context.Background(), src, CaptureRequest{DBPath: filepath.Join(few, "state.db"), PID: 9})
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("out of inodes: %v", err)
	}
	if ents, _ := os.ReadDir(few); len(ents) != 0 {
		t.Fatalf("a capture that hit ENOSPC left %v", ents)
	}
}
