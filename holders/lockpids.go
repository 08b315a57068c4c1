package holders

import (
	"bytes"
	"slices"

	"github.com/stateguard/stateguard/fileid"
)

// lockPidsIn lists the pids that own a POSIX lock (held, not waited for)
// on one of inos in the /proc/locks text b, without self. Only inode
// numbers are compared: the device the kernel prints is the superblock's,
// which stat(2) reports differently on some filesystems (btrfs, overlay),
// and a pid found here is only a candidate the caller inspects.
func lockPidsIn(b []byte, ids []fileid.ID, self int) []int {
	var out []int
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		l, ok := parseLockLine(line)
		if !ok || l.waiter || l.fileOwned() || l.pid <= 0 || l.pid == self {
			continue
		}
		if slices.ContainsFunc(ids, func(id fileid.ID) bool { return id.Ino == l.id.Ino }) && !slices.Contains(out, l.pid) {
			out = append(out, l.pid)
		}
	}
	slices.Sort(out)
	return out
}
