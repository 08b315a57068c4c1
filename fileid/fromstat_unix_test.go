//go:build unix

package fileid

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The raw stat conversion and the os.FileInfo one agree.
func TestFromStatMatchesOf(t *testing.T) {
	f := filepath.Join(t.TempDir(), "a")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(f, &st); err != nil {
		t.Fatal(err)
	}
	s, err := Lstat(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := FromStat(&st); got != s.ID {
		t.Fatalf("FromStat %v, Of %v", got, s.ID)
	}
}
