package journald

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// IsJournalStream reports whether f is the stream journald connected the
// service's output to: systemd sets $JOURNAL_STREAM to "<dev>:<ino>" of
// that socket, and a process whose stderr still has that device and inode
// (not redirected by a wrapper or a shell) may switch to the native
// protocol. journalStream is the variable's value.
func IsJournalStream(journalStream string, f *os.File) (bool, error) {
	if journalStream == "" {
		return false, nil
	}
	d, i, ok := strings.Cut(journalStream, ":")
	dev, derr := strconv.ParseUint(d, 10, 64)
	ino, ierr := strconv.ParseUint(i, 10, 64)
	if !ok || derr != nil || ierr != nil {
		return false, fmt.Errorf("JOURNAL_STREAM=%q: want <device>:<inode>", journalStream)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false, fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	return uint64(st.Dev) == dev && st.Ino == ino, nil
}
