package holders

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// StartTicks reads pid's start time, to name it in a ProcRef when only
// its pid is known (a fanotify event's writer).
func StartTicks(pid int) (uint64, error) {
	st, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	return st.StartTicks, nil
}

// Writes reports whether p still has an fd open for writing on inode id:
// a process rewriting a store's main in place (cp, rsync --inplace) has
// not finished while it does. A process that is gone, or whose fds cannot
// be read, does not write.
func Writes(p ProcRef, id fileid.ID) bool {
	if st, err := readStat(p.Pid); err != nil || st.StartTicks != p.StartTicks {
		return false
	}
	dir := "/proc/" + strconv.Itoa(p.Pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		var st unix.Stat_t
		// stat of the magic link reaches the inode in any mount namespace.
		if unix.Stat(dir+"/"+e.Name(), &st) != nil || fileid.FromStat(&st) != id {
			continue
		}
		if fdWritable("/proc/" + strconv.Itoa(p.Pid) + "/fdinfo/" + e.Name()) {
			return true
		}
	}
	return false
}

// fdWritable reads the flags line of an fdinfo file: O_WRONLY or O_RDWR.
func fdWritable(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("flags:")); ok {
			fl, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 8, 64)
			return err == nil && fl&unix.O_ACCMODE != unix.O_RDONLY
		}
	}
	return false
}
