package store

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// The process's file table, as /proc/self/fd shows it (the main
// thread's), stays the one every other thread uses: a private copy made
// on the main thread (Go wedges a locked main thread instead of ending
// it) kept every fd open at that moment, and their OFD locks, for the
// life of the agent. A guard's main lock outlived its release that way,
// and the holder scan could not find the agent's own fds.
func TestInPrivateFDTableLeavesTheProcessTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "probe")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		fd := strconv.Itoa(int(f.Fd()))
		ran := false
		if err := InPrivateFDTable(func() { ran = true }); err != nil {
			t.Fatal(err)
		}
		if !ran {
			t.Fatal("f did not run")
		}
		f.Close()
		if target, err := os.Readlink("/proc/self/fd/" + fd); err == nil && target == path {
			t.Fatalf("call %d: /proc/self/fd/%s still names %s after it was closed: the main thread's file table is a private copy", i, fd, path)
		}
	}
}
