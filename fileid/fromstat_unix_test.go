//go:build linux || darwin

package fileid

import (
	"os"
	"path/filepath"
	"syscall"
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

// ModeOf must agree with os.Lstat, which the by-name paths use, for every
// kind of file a profile directory can hold.
func TestModeOfMatchesLstat(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "f")
	if err := os.WriteFile(reg, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "l")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "p")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "d")
	if err := os.Mkdir(sub, 0o1755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{reg, link, fifo, sub} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := ModeOf(uint32(fi.Sys().(*syscall.Stat_t).Mode)); got != fi.Mode() {
			t.Errorf("%s: ModeOf %v, os.Lstat %v", p, got, fi.Mode())
		}
	}
}
