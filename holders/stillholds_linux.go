package holders

import (
	"errors"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// StillHolds reports whether p, as a cached scan saw it, still holds the
// inode id now through an open fd: one stat of /proc/<pid>/fd/<fd>, cheap
// enough for the fast freeze to ask before it stops anyone. SQLite's own
// last closer closes its -wal before it unlinks it, so the cache's picture
// of it is stale by the time the unlink is seen; this is what keeps the
// fast path from stopping it. A hold known only from a lock (no fd, no
// mapping) cannot be re-checked this cheaply and counts as held, as does a
// /proc entry that cannot be read for any reason but the process or fd
// being gone.
//
// A mapping alone does not count. A writer always holds an fd on what it
// writes (SQLite never drops the fd of a file it maps), so the fast path
// loses no writer; the confirming scan still sees mappings. And a mapping
// is what a clean closer still has for a moment after it unlinked its
// sidecars: counting it stopped such closers (TestCleanCloseIsNeverStopped
// under -race in CI, "stale wal fd -1 mapped true", no EXCLUSIVE lock left
// on the main by then to tell it was closing).
func StillHolds(p *Process, id fileid.ID) bool {
	for i := range p.Files {
		f := &p.Files[i]
		if f.ID != id {
			continue
		}
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
	return false
}
