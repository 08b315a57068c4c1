package hermestest

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// StartPiped starts cmd with a pipe to its stdin and one from its stdout:
// a helper process that runs until its stdin ends, which happens (and is
// waited for) at cleanup.
func StartPiped(tb testing.TB, cmd *exec.Cmd) (io.WriteCloser, *bufio.Reader) {
	tb.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { in.Close(); cmd.Wait() })
	return in, bufio.NewReader(out)
}

// FirstLine is the first line a helper process writes, without the
// newline; "" when it ends its output first. The test fails when no line
// comes within d.
func FirstLine(tb testing.TB, what string, r *bufio.Reader, d time.Duration) string {
	tb.Helper()
	lines := make(chan string, 1)
	go func() {
		s, _ := r.ReadString('\n')
		lines <- strings.TrimSpace(s)
	}()
	select {
	case s := <-lines:
		return s
	case <-time.After(d):
		tb.Fatalf("%s wrote no line within %s", what, d)
		return ""
	}
}

// CopyFile copies src to a new file dst (never over one) with mode perm.
func CopyFile(tb testing.TB, src, dst string, perm os.FileMode) {
	tb.Helper()
	in, err := os.Open(src)
	if err != nil {
		tb.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		tb.Fatal(err)
	}
	if err := out.Close(); err != nil {
		tb.Fatal(err)
	}
}

// DirState is every entry of dir with its inode, mode, size and content
// hash, one a line: "nothing changed" means equal DirStates. Entries whose
// name ends in one of identityOnly are compared by inode and mode only (a
// -shm, whose read marks SQLite readers legitimately update).
func DirState(tb testing.TB, dir string, identityOnly ...string) string {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var b strings.Builder
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(p)
		if err != nil {
			tb.Fatal(err)
		}
		fmt.Fprintf(&b, "%s ino=%d mode=%v", e.Name(), fi.Sys().(*syscall.Stat_t).Ino, fi.Mode())
		if slices.ContainsFunc(identityOnly, func(s string) bool { return strings.HasSuffix(e.Name(), s) }) {
			b.WriteByte('\n')
			continue
		}
		sum := ""
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				tb.Fatal(err)
			}
			h := sha256.Sum256(data)
			sum = hex.EncodeToString(h[:8])
		}
		fmt.Fprintf(&b, " size=%d sum=%s\n", fi.Size(), sum)
	}
	return b.String()
}
