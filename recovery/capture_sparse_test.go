//go:build linux

package recovery

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// diskBytes is what the files under dir take on disk (st_blocks), not
// their sizes: the measure of a capture that must not copy holes.
func diskBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n += st.Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Attack row 7, the -wal: an orphaned WAL grown to a sparse 1 GiB is
// captured, and privately copied for the divert, through its last frame
// only (capture_walend.go); every acknowledged row is still in the copy.
func TestCaptureSparseWALCopiesDataOnly(t *testing.T) {
	gen, acks := crashedGeneration(t, 20, true)
	if err := os.Truncate(gen+"-wal", 1<<30); err != nil {
		t.Fatal(err)
	}
	src := openPinned(t, gen)
	dir := t.TempDir()
	c, err := WriteCapture(context.Background(), src, CaptureRequest{DBPath: filepath.Join(dir, "state.db"), PID: 7})
	if err != nil {
		t.Fatal(err)
	}
	if got := diskBytes(t, c.Dir); got > 16<<20 {
		t.Fatalf("capture of a sparse 1 GiB -wal takes %d bytes on disk", got)
	}
	if fi, err := os.Stat(filepath.Join(c.Dir, "state.db-wal")); err != nil || fi.Size() >= 1<<30 {
		t.Fatalf("captured -wal: %v, size %d, want its frames only", err, fi.Size())
	}
	tmp := t.TempDir()
	copyPath, err := PrivateCopy(context.Background(), c.Dir, tmp)
	if err != nil {
		t.Fatal(err)
	}
	if got := diskBytes(t, tmp); got > 16<<20 {
		t.Fatalf("private copy of the capture takes %d bytes on disk", got)
	}
	checkRows(t, readOnly(t, copyPath), acks)
}

// Attack row 7, the main: a sidecar_lost snapshot of a 3 GiB sparse main
// (over the 512 MiB main-image rule) keeps its header only, in a sparse
// file of its size, and the capture made from it is header-only.
func TestSnapshotOfHugeMainKeepsHeaderOnly(t *testing.T) {
	gen, _ := crashedGeneration(t, 3, true)
	src := openPinned(t, gen)
	head, err := readHead(src.Main, sqliteHeaderBytes)
	if err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(big, head, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 3<<30); err != nil {
		t.Fatal(err)
	}
	bf, err := os.Open(big)
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	snapDir := t.TempDir()
	snap := filepath.Join(snapDir, "state.db.snapshot")
	if err := SnapshotMain(context.Background(), big, bf, snap); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(snap)
	if err != nil || fi.Size() != 3<<30 {
		t.Fatalf("snapshot: %v, size %d", err, fi.Size())
	}
	if got := diskBytes(t, snap); got > 1<<20 {
		t.Fatalf("snapshot of a 3 GiB sparse main takes %d bytes on disk", got)
	}
	if got, _ := readHeadFile(t, snap); !bytes.Equal(got, head) {
		t.Fatal("the snapshot does not start with the main's header")
	}
	capDir := t.TempDir()
	c, err := WriteCapture(context.Background(), CaptureSource{WAL: src.WAL, SHM: src.SHM, MainSnapshot: snap},
		CaptureRequest{DBPath: filepath.Join(capDir, "state.db"), PID: 7, Kind: KindSidecarLost})
	if err != nil {
		t.Fatal(err)
	}
	if !c.MainHeaderOnly || diskBytes(t, c.Dir) > 16<<20 {
		t.Fatalf("capture from the snapshot: header-only %v, %d bytes on disk", c.MainHeaderOnly, diskBytes(t, c.Dir))
	}
}

func readHeadFile(t *testing.T, p string) ([]byte, error) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readHead(f, sqliteHeaderBytes)
}

// Without capture.max_bytes a capture may take half the free space of
// its filesystem: one that needs more is refused with a BudgetError (the
// sizes for capture.skipped) before anything is written.
func TestCaptureDefaultBudgetIsHalfTheFreeSpace(t *testing.T) {
	fs := mountTmpfs(t, "size=8m,mode=0700")
	gen, _ := crashedGeneration(t, 3, true)
	// In the main: a capture keeps a -wal's frames only, and the main
	// whole (under 512 MiB).
	f, err := os.OpenFile(gen, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Repeat([]byte{0xa5}, 5<<20)); err != nil { // dense: it all must be copied
		t.Fatal(err)
	}
	f.Close()
	src := openPinned(t, gen)
	_, err = WriteCapture(context.Background(), src, CaptureRequest{DBPath: filepath.Join(fs, "state.db"), PID: 7})
	var over *BudgetError
	if !errors.As(err, &over) || !errors.Is(err, ErrNoSpace) || over.Configured || over.Need <= over.Budget || over.Budget > over.Free/2 {
		t.Fatalf("capture of 5 MiB into 8 MiB: %v (%+v), want the default budget refusing it", err, over)
	}
	if left := retiredDirs(t, fs); len(left) > 0 {
		t.Fatalf("refused capture left %v", left)
	}
}

// Private copies and copies at a cut whose process is gone (a kill -9
// mid-divert) are removed; the caller's own and a live process's are
// kept, and so is a directory the real code just made (its owner file
// names this process).
func TestCleanPrivateCopies(t *testing.T) {
	tmp := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	live := exec.Command("sleep", "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Process.Kill(); live.Wait() })
	mk := func(name string, pid int) string {
		d := filepath.Join(tmp, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, privateOwnerFile), []byte(itoa(pid)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return d
	}
	var gone, kept []string
	for _, prefix := range []string{privatePrefix, cutPrefix} {
		gone = append(gone, mk(prefix+"gone", dead.Process.Pid))
		kept = append(kept, mk(prefix+"mine", os.Getpid()), mk(prefix+"live", live.Process.Pid))
		d, _, err := makePrivateDir(tmp, prefix)
		if err != nil {
			t.Fatal(err)
		}
		d.close()
		kept = append(kept, d.path)
	}
	removed, err := CleanPrivateCopies(tmp)
	if err != nil || !slices.Equal(slices.Sorted(slices.Values(removed)), slices.Sorted(slices.Values(gone))) {
		t.Fatalf("removed %v, %v: want only %v", removed, err, gone)
	}
	for _, d := range kept {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s removed: %v", d, err)
		}
	}
}

// A capture that replaces an earlier one of the same incident counts that
// one's bytes as free for the default budget (the final capture after a
// release, on seed 2's small full-disk profile, was refused for good),
// but still needs the free space itself.
func TestCaptureBudgetCountsTheCaptureItSupersedes(t *testing.T) {
	fs := mountTmpfs(t, "size=10m,mode=0700")
	gen, _ := crashedGeneration(t, 3, true)
	f, err := os.OpenFile(gen, os.O_WRONLY|os.O_APPEND, 0) // the main: see above
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Repeat([]byte{0xa5}, 5<<20)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	src := openPinned(t, gen)
	req := CaptureRequest{DBPath: filepath.Join(fs, "state.db"), PID: 7}
	var over *BudgetError
	if _, err := WriteCapture(context.Background(), src, req); !errors.As(err, &over) {
		t.Fatalf("capture of 5 MiB into 10 MiB with nothing superseded: %v, want the default budget refusing it", err)
	}
	req.Supersedes = 5 << 20
	c, err := WriteCapture(context.Background(), src, req)
	if err != nil {
		t.Fatalf("capture superseding a 5 MiB one: %v", err)
	}
	if c.Bytes < 5<<20 {
		t.Fatalf("capture of %d bytes", c.Bytes)
	}
	req.Supersedes = 64 << 20 // counted as free for the budget, but not on the disk
	if _, err := WriteCapture(context.Background(), src, req); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a second 5 MiB capture into what is left: %v, want no space", err)
	}
}
