package hermestest

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Lock is one held lock of /proc/locks.
type Lock struct {
	Class      string // POSIX, OFDLCK, FLOCK, ...
	Mode       string // READ or WRITE
	PID        int    // the owner; -1 for an OFD lock on older kernels
	Start, End string // as printed ("EOF" for a lock to the end)
}

// LocksOn lists the locks held on the inode (dev, ino) in /proc/locks,
// dev in stat(2)'s encoding; waiters are left out. A test skips where
// there is no /proc/locks.
func LocksOn(tb testing.TB, dev, ino uint64) []Lock {
	tb.Helper()
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		tb.Skipf("no /proc/locks: %v", err)
	}
	var out []Lock
	for line := range strings.SplitSeq(string(b), "\n") {
		// "1: OFDLCK ADVISORY READ -1 08:01:1234 1073741826 1073742335"
		f := strings.Fields(line)
		if len(f) < 8 || f[1] == "->" {
			continue
		}
		parts := strings.Split(f[5], ":")
		if len(parts) != 3 {
			continue
		}
		maj, err1 := strconv.ParseUint(parts[0], 16, 32)
		minr, err2 := strconv.ParseUint(parts[1], 16, 32)
		i, err3 := strconv.ParseUint(parts[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		if i == ino && unix.Mkdev(uint32(maj), uint32(minr)) == dev {
			pid, _ := strconv.Atoi(f[4])
			out = append(out, Lock{Class: f[1], Mode: f[3], PID: pid, Start: f[6], End: f[7]})
		}
	}
	return out
}
