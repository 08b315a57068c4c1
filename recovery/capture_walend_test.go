//go:build linux

package recovery

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
)

// A -wal an attacker (or a crash) left huge: its frames, then garbage,
// then truncated up to 200 GiB (sparse, unlinked-and-pinned as an orphan
// is). The capture keeps the frames anyone reads and stops there: it takes
// seconds, not the minutes of hashing 200 GiB of zeros, and every
// acknowledged row is in it.
func TestCaptureStopsAtTheLastValidFrame(t *testing.T) {
	gen, acks := crashedGeneration(t, 20, true)
	fi, err := os.Stat(gen + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	frames := fi.Size()
	f, err := os.OpenFile(gen+"-wal", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 1<<20)
	rand.Read(junk)
	if _, err := f.Write(junk); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Truncate(gen+"-wal", 200<<30); err != nil {
		t.Fatal(err)
	}
	src := openPinned(t, gen)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	c, err := WriteCapture(ctx, src, CaptureRequest{DBPath: filepath.Join(t.TempDir(), "state.db"), PID: 7})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("capture of a 200 GiB sparse -wal (%v): %v", took, err)
	}
	t.Logf("capture of a 200 GiB sparse -wal with %d bytes of frames took %v", frames, took)
	cw, err := os.Stat(filepath.Join(c.Dir, "state.db-wal"))
	if err != nil || cw.Size() != frames {
		t.Fatalf("captured -wal: %v, %d bytes, want its %d bytes of frames", err, cw.Size(), frames)
	}
	if took > 20*time.Second {
		t.Errorf("the capture took %v", took)
	}
	copyPath, err := PrivateCopy(context.Background(), c.Dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, readOnly(t, copyPath), acks)
}

// A -wal that is no WAL (no frame anyone reads) with one byte of data at
// 200 GiB is kept to its last data byte, hashing the hole as zeros: a
// cancelled capture stops within moments and leaves nothing behind.
func TestCaptureOfAHugeHoleIsCancelled(t *testing.T) {
	gen, _ := crashedGeneration(t, 3, true)
	f, err := os.OpenFile(gen+"-wal", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("not a WAL header"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{1}, 200<<30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	src := openPinned(t, gen)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err = WriteCapture(ctx, src, CaptureRequest{DBPath: filepath.Join(dir, "state.db"), PID: 7})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("capture after %v: %v, want it cancelled", took, err)
	}
	if took > 10*time.Second {
		t.Errorf("the cancelled capture went on for %v", took)
	}
	if left := retiredDirs(t, dir); len(left) > 0 {
		t.Errorf("cancelled capture left %v", left)
	}
}

// The same -wal quarantined into the capture (a mispaired store nobody
// holds) is adopted cut after its frames, in moments.
func TestAdoptedQuarantinedWALIsCutAtItsLastFrame(t *testing.T) {
	gen, acks := crashedGeneration(t, 20, true)
	fi, err := os.Stat(gen + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	frames := fi.Size()
	if err := os.Truncate(gen+"-wal", 200<<30); err != nil {
		t.Fatal(err)
	}
	src := openPinned(t, gen)
	staging, err := StageCapture(CaptureRequest{DBPath: gen, PID: 9})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := QuarantineSidecars(gen, staging, map[string]fileid.ID{"-wal": statID(t, gen+"-wal")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	c, err := WriteCapture(ctx, CaptureSource{Main: src.Main}, CaptureRequest{DBPath: gen, PID: 9, Staging: staging, Kind: KindMispaired})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("capture adopting a 200 GiB sparse -wal (%v): %v", took, err)
	}
	if cw, err := os.Stat(filepath.Join(c.Dir, "state.db-wal")); err != nil || cw.Size() != frames {
		t.Fatalf("adopted -wal: %v, %d bytes, want its %d bytes of frames", err, cw.Size(), frames)
	}
	if took > 20*time.Second {
		t.Errorf("the capture took %v", took)
	}
	copyPath, err := PrivateCopy(context.Background(), c.Dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, readOnly(t, copyPath), acks)
}
