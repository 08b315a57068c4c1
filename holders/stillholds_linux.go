package holders

import (
	"bytes"
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// StillHolds reports whether p, as a cached scan saw it, still holds the
// inode id now: one stat of /proc/<pid>/fd/<fd> (and, for a mapped inode
// whose fd is gone, one read of /proc/<pid>/maps), cheap enough for the
// fast freeze to ask before it stops anyone. SQLite's own last closer
// closes its -wal before it unlinks it, so the cache's picture of it is
// stale by the time the unlink is seen; this is what keeps the fast path
// from stopping it. A hold known only from a lock (no fd, no mapping)
// cannot be re-checked this cheaply and counts as held, as does a /proc
// entry that cannot be read for any reason but the process or fd being
// gone.
func StillHolds(p *Process, id fileid.ID) bool {
	mapped := false
	for i := range p.Files {
		f := &p.Files[i]
		if f.ID != id {
			continue
		}
		mapped = mapped || f.Mapped
		if f.FD < 0 {
			if !f.Mapped {
				return true // lock evidence only
			}
			continue
		}
		var st unix.Stat_t
		err := unix.Stat("/proc/"+strconv.Itoa(p.Pid)+"/fd/"+strconv.Itoa(f.FD), &st)
		switch {
		case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH):
		case err != nil:
			return true
		case fileid.FromStat(&st) == id:
			return true
		}
	}
	return mapped && stillMaps(p.Pid, id)
}

// stillMaps reports whether pid maps an inode numbered id.Ino now (the
// kernel prints the superblock's device, which may differ from stat's, so
// only the number is compared: a false match only keeps the fast freeze
// as it was).
func stillMaps(pid int, id fileid.ID) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ESRCH)
	}
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		if e, ok := parseMapsLine(line); ok && e.Ino == id.Ino {
			return true
		}
	}
	return false
}
