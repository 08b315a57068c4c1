//go:build unix

package recovery

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// An owner file that is a FIFO or a symlink to /dev/zero (planted by
// another user in the shared temp dir) neither blocks the clean-up nor
// makes it read without end: it returns promptly and removes the entries,
// naming them.
func TestCleanPrivateCopiesBadOwnerFile(t *testing.T) {
	tmp := t.TempDir()
	fifo := filepath.Join(tmp, privatePrefix+"fifo")
	zero := filepath.Join(tmp, cutPrefix+"zero")
	big := filepath.Join(tmp, privatePrefix+"big")
	for _, d := range []string{fifo, zero, big} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(fifo, privateOwnerFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(zero, privateOwnerFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(big, privateOwnerFile), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		removed []string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		removed, err := CleanPrivateCopies(tmp)
		done <- result{removed, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("CleanPrivateCopies did not return in 5s with a FIFO and /dev/zero as owner files")
	}
	if len(r.removed) != 3 {
		t.Errorf("removed %v, want the three planted directories", r.removed)
	}
	for _, d := range []string{fifo, zero, big} {
		if _, err := os.Lstat(d); !os.IsNotExist(err) {
			t.Errorf("%s still there: %v", d, err)
		}
		if r.err == nil || !strings.Contains(r.err.Error(), d+"/"+privateOwnerFile) {
			t.Errorf("error %v does not name %s", r.err, d)
		}
	}
}
