//go:build linux

package recovery

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
)

func statID(t *testing.T, path string) fileid.ID {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fileid.FromStat(&st)
}

// stopWriter freezes the writer with SIGSTOP, waits until the kernel says
// it is stopped, and returns a function that SIGKILLs it and waits for its
// exit, so no close-time checkpoint can run (the kill release policy).
func stopWriter(t *testing.T, w *hermestest.Writer) (kill func()) {
	t.Helper()
	if err := syscall.Kill(w.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", w.Pid))
		if err != nil {
			t.Fatalf("writer %d: %v", w.Pid, err)
		}
		// The state is the field after the parenthesised command name.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && len(b) > i+2 && (b[i+2] == 'T' || b[i+2] == 't') {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writer %d not stopped after 10s", w.Pid)
		}
		time.Sleep(time.Millisecond)
	}
	return func() {
		w.Kill()
		<-w.Done()
	}
}

// pinFromProc opens read-only fds on the files pid holds whose identity is
// in want (keys are the caller's names), the way the holders package pins
// an orphan: candidates are found by readlink of /proc/<pid>/fd (a path of
// the store's family, " (deleted)" or not) and confirmed by identity.
func pinFromProc(t *testing.T, pid int, dbPath string, want map[string]fileid.ID) map[string]*os.File {
	t.Helper()
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*os.File{}
	for _, e := range ents {
		p := filepath.Join(fdDir, e.Name())
		target, err := os.Readlink(p)
		if err != nil || !strings.HasPrefix(strings.TrimSuffix(target, " (deleted)"), dbPath) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			continue
		}
		for k, id := range want {
			if id == fileid.FromStat(&st) && got[k] == nil {
				f, err := os.Open(p)
				if err != nil {
					t.Fatalf("pin %s (%s): %v", p, target, err)
				}
				t.Cleanup(func() { f.Close() })
				got[k] = f
			}
		}
	}
	for k, id := range want {
		if got[k] == nil {
			t.Fatalf("pid %d holds no fd on %s (%s)", pid, k, id)
		}
	}
	return got
}

// crashedGeneration runs the test writer on a new store until it has
// acknowledged n messages, SIGKILLs it (so nothing is checkpointed) and
// returns the store path and its acks: a generation whose newest rows live
// only in its -wal, as an orphan's do. schemaInMain puts the schema into
// the main first, so the WAL holds only the rows.
func crashedGeneration(t *testing.T, n int, schemaInMain bool) (string, []hermestest.Ack) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "state.db")
	if schemaInMain {
		if err := hermestest.CreateStore(db); err != nil {
			t.Fatal(err)
		}
	}
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: !schemaInMain, Count: n, Linger: true, CheckpointEvery: -1})
	acks := w.WaitAcks(t, n)
	stopWriter(t, w)()
	return db, acks
}

// openPinned opens the files of a generation read-only, standing in for
// fds pinned through /proc.
func openPinned(t *testing.T, db string) CaptureSource {
	t.Helper()
	var src CaptureSource
	src.Main, src.WAL, src.SHM = hermestest.OpenGeneration(t, db)
	return src
}

// checkRows asserts every ack is a row of db and the database is sound.
func checkRows(t *testing.T, db *sql.DB, acks []hermestest.Ack) {
	t.Helper()
	for _, a := range acks {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM messages WHERE session_id=? AND content=? AND timestamp=?`,
			a.Session, hermestest.MessageContent(a.Session, a.Seq), a.Timestamp).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("acknowledged message %s #%d: %d rows", a.Session, a.Seq, n)
		}
	}
	var ic string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&ic); err != nil {
		t.Fatal(err)
	}
	if ic != "ok" {
		t.Fatalf("integrity_check: %s", ic)
	}
}

// retiredDirs lists dir's entries that look like captures (any stage).
func retiredDirs(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.Contains(e.Name(), retiredInfix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// mountTmpfs mounts a tmpfs with opts on a new directory, or skips the
// test when this process may not mount (not root, no CAP_SYS_ADMIN).
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Skipf("cannot mount a tmpfs (%s) here: %v; this needs root with CAP_SYS_ADMIN", opts, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// mountBtrfs makes a small btrfs on a sparse loop image, a filesystem
// with reflinks, or skips when mkfs.btrfs or loop mounts are unavailable.
func mountBtrfs(t *testing.T) string {
	t.Helper()
	mkfs, err := exec.LookPath("mkfs.btrfs")
	if err != nil {
		t.Skip("mkfs.btrfs not installed (btrfs-progs): no reflink-capable filesystem to test on")
	}
	img := filepath.Join(t.TempDir(), "btrfs.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(256 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if out, err := exec.Command(mkfs, "-q", img).CombinedOutput(); err != nil {
		t.Skipf("mkfs.btrfs failed: %v %s", err, out)
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		t.Skipf("cannot loop-mount a btrfs image here (needs root and loop devices): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}
