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

// Peek is a quick look at one process's fds, for the first write of an
// unknown process into a store's main: who it is and which of the given
// inodes it has open. It reads no mapping or lock: a SQLite connection in
// WAL mode always has its -wal and -shm open as fds.
type Peek struct {
	Ref  ProcRef
	PPid int
	Exe  string
	Open map[fileid.ID]bool
}

// PeekFDs looks at pid's fds for ids. A process that is gone gives
// ErrProcessGone.
func PeekFDs(pid int, ids ...fileid.ID) (Peek, error) {
	st, err := readStat(pid)
	if err != nil {
		return Peek{}, err
	}
	pk := Peek{Ref: ProcRef{Pid: pid, StartTicks: st.StartTicks}, PPid: st.PPid, Open: map[fileid.ID]bool{}}
	base := "/proc/" + strconv.Itoa(pid)
	pk.Exe, _ = os.Readlink(base + "/exe")
	ents, err := os.ReadDir(base + "/fd")
	if err != nil {
		return pk, err
	}
	for _, e := range ents {
		var fst unix.Stat_t
		if unix.Stat(base+"/fd/"+e.Name(), &fst) != nil {
			continue
		}
		id := fileid.FromStat(&fst)
		for _, want := range ids {
			if id == want {
				pk.Open[id] = true
			}
		}
	}
	// Its fds were read from the process that started then, not a
	// successor with the same pid.
	if st2, err := readStat(pid); err != nil || st2.StartTicks != st.StartTicks {
		return Peek{}, ErrProcessGone
	}
	return pk, nil
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
