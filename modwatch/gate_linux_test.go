//go:build linux

package modwatch

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// newGated starts a Watcher whose callback hands OpenWrite events to the
// test and holds each until hold returns; it skips without permission
// events.
func newGated(t *testing.T, hold func()) (*Watcher, chan Event) {
	t.Helper()
	opens := make(chan Event, 16)
	w, err := New(func(e Event) {
		if e.Op == OpenWrite {
			opens <- e
			hold()
		}
	}, Config{})
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("no fanotify here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	if !w.Gated() {
		t.Skip("no fanotify permission events here")
	}
	return w, opens
}

func gateFiles(t *testing.T) (main, src string) {
	t.Helper()
	dir := t.TempDir()
	main, src = filepath.Join(dir, "state.db"), filepath.Join(dir, "backup.db")
	if err := os.WriteFile(main, []byte("old content"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, bytes.Repeat([]byte("new"), 1<<18), 0o600); err != nil {
		t.Fatal(err)
	}
	return main, src
}

// TestGateHoldsWritingOpen: cp's open(2) of a watched file waits until
// the callback returns, so nothing of the file is written before; a
// read-write open (how SQLite opens a main) is let through unreported.
func TestGateHoldsWritingOpen(t *testing.T) {
	release := make(chan struct{})
	w, opens := newGated(t, func() { <-release })
	main, src := gateFiles(t)
	id, err := w.Watch(main)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-c", "exec 3<>"+main).CombinedOutput(); err != nil {
		t.Fatalf("read-write open: %v %s", err, out)
	}
	cp := exec.Command("cp", src, main)
	if err := cp.Start(); err != nil {
		t.Fatal(err)
	}
	var e Event
	select {
	case e = <-opens:
	case <-time.After(10 * time.Second):
		t.Fatal("cp's open was not reported")
	}
	if e.Pid != cp.Process.Pid || e.ID != id {
		t.Fatalf("open-write event %+v, want cp (pid %d) on %v (the read-write open is not reported)", e, cp.Process.Pid, id)
	}
	if b, err := os.ReadFile(main); err != nil || string(b) != "old content" {
		t.Fatalf("the file changed while cp's open was held: %q %v", b, err)
	}
	close(release)
	if err := cp.Wait(); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(src)
	if b, _ := os.ReadFile(main); !bytes.Equal(b, want) {
		t.Fatal("cp did not finish its copy once let through")
	}
}

// TestGateLetsThroughAfterTimeout: a callback that never returns holds
// an open for GateTimeout only; the open then goes through.
func TestGateLetsThroughAfterTimeout(t *testing.T) {
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	w, opens := newGated(t, func() { <-stuck })
	main, src := gateFiles(t)
	if _, err := w.Watch(main); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", src, main).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if len(opens) != 1 {
		t.Fatalf("%d open-write events, want cp's", len(opens))
	}
}

// TestClosedGateHoldsNothing: a gate started while another Watcher's is
// open must not keep that one alive in its private file table: once the
// first Watcher is closed, an open for writing of its file goes through
// (nobody would ever answer it).
func TestClosedGateHoldsNothing(t *testing.T) {
	first, _ := newGated(t, func() {})
	main, src := gateFiles(t)
	if _, err := first.Watch(main); err != nil {
		t.Fatal(err)
	}
	newGated(t, func() {}) // its gate thread copies the agent's fd table now
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "cp", src, main).CombinedOutput(); err != nil {
		t.Fatalf("cp over the closed Watcher's file: %v %s (its open was left waiting)", err, out)
	}
}
