//go:build linux

package modwatch

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func newWatcher(t *testing.T) (*Watcher, chan Event) {
	t.Helper()
	evs := make(chan Event, 1024)
	w, err := New(func(e Event) {
		select {
		case evs <- e:
		default:
		}
	}, Config{})
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("no fanotify here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w, evs
}

// waitFor returns the first event matching ok, failing after a deadline.
func waitFor(t *testing.T, evs chan Event, what string, ok func(Event) bool) Event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e := <-evs:
			if ok(e) {
				return e
			}
		case <-deadline:
			t.Fatalf("no %s event", what)
		}
	}
}

// TestWriterPid: cp rewriting a watched file in place is reported with
// cp's own pid, its write and its close; a write of this process is
// reported with this process's pid.
func TestWriterPid(t *testing.T) {
	w, evs := newWatcher(t)
	dir := t.TempDir()
	main, src := filepath.Join(dir, "state.db"), filepath.Join(dir, "backup.db")
	if err := os.WriteFile(main, []byte("old content"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	id, err := w.Watch(main)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cp", src, main)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	e := waitFor(t, evs, "cp write", func(e Event) bool { return e.Op == Write && e.Pid == pid })
	if e.ID != id {
		t.Fatalf("event on %v, watched %v", e.ID, id)
	}
	waitFor(t, evs, "cp close-write", func(e Event) bool { return e.Op == CloseWrite && e.Pid == pid && e.ID == id })

	// The mark follows the inode: renamed aside, it is still reported.
	aside := filepath.Join(dir, "state.db.old")
	if err := os.Rename(main, aside); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(aside, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	waitFor(t, evs, "own write", func(e Event) bool { return e.Op == Write && e.Pid == os.Getpid() && e.ID == id })
}

// TestUnwatch: after Unwatch no event of the inode is reported.
func TestUnwatch(t *testing.T) {
	w, evs := newWatcher(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ida, err := w.Watch(a)
	if err != nil {
		t.Fatal(err)
	}
	idb, err := w.Watch(b)
	if err != nil {
		t.Fatal(err)
	}
	w.Unwatch(ida)
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, []byte("y"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// b's event comes after a's would have: once it is here, a had its
	// chance.
	for e := range evs {
		if e.ID == ida {
			t.Fatalf("event %+v of an unwatched inode", e)
		}
		if e.ID == idb && e.Op == CloseWrite {
			break
		}
	}
	if _, err := w.Watch(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("Watch of a missing file succeeded")
	}
}
