//go:build linux

package modwatch

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestInotifyBackend: what a Watcher without CAP_SYS_ADMIN reports: cp's
// write and close of a watched file, with no pid; the watch follows the
// inode renamed aside; nothing after Unwatch.
func TestInotifyBackend(t *testing.T) {
	evs := make(chan Event, 1024)
	w, err := newInotify(func(e Event) {
		select {
		case evs <- e:
		default:
		}
	}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	if w.Attributed() || w.Gated() {
		t.Fatal("an inotify Watcher claims writer pids or held opens")
	}
	dir := t.TempDir()
	main, src := filepath.Join(dir, "state.db"), filepath.Join(dir, "backup.db")
	for _, p := range []string{main, src} {
		if err := os.WriteFile(p, []byte("content of "+p), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	id, err := w.Watch(main)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", src, main).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	e := waitFor(t, evs, "cp write", func(e Event) bool { return e.Op == Write })
	if e.ID != id || e.Pid != 0 {
		t.Fatalf("event %+v, want a write of %v with no pid", e, id)
	}
	waitFor(t, evs, "cp close-write", func(e Event) bool { return e.Op == CloseWrite && e.ID == id })

	aside := filepath.Join(dir, "state.db.old")
	if err := os.Rename(main, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(aside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, evs, "write of the renamed file", func(e Event) bool { return e.Op == CloseWrite && e.ID == id })
	w.Unwatch(id)
	if err := os.WriteFile(aside, []byte("y"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("z"), 0o600); err != nil {
		t.Fatal(err)
	}
	oid, err := w.Watch(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, []byte("zz"), 0o600); err != nil {
		t.Fatal(err)
	}
	for e := range evs {
		if e.ID == id {
			t.Fatalf("event %+v of an unwatched inode", e)
		}
		if e.ID == oid && e.Op == CloseWrite {
			break
		}
	}
}
