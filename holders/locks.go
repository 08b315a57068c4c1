package holders

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/stateguard/stateguard/fileid"
)

// Lock evidence. /proc/locks is readable by every user and lists every
// POSIX, OFD and flock lock with the device and inode it is on: every
// SQLite connection to a WAL database holds a read lock on the -shm DMS
// byte and on the main file's SHARED range for as long as it is open, so
// a process the scan cannot inspect is still seen holding a store when it
// is a live connection. The parsers live here, free of build tags, so they
// are tested on every OS.

// lockEntry is one line of /proc/locks, or a "lock:" line of
// /proc/<pid>/fdinfo/<fd>.
type lockEntry struct {
	class  string // POSIX, OFDLCK, FLOCK, LEASE, DELEG
	write  bool
	pid    int       // POSIX: the owner; OFD locks show -1 on most kernels
	id     fileid.ID // Dev as the kernel prints it (the superblock's), in stat(2)'s encoding
	start  uint64
	end    uint64 // math.MaxUint64 for EOF
	waiter bool   // "->": blocked, waiting for the lock
}

// fileOwned reports whether the lock belongs to an open file description
// rather than a process: its pid, if shown, is only who took it.
func (l lockEntry) fileOwned() bool { return l.class != "POSIX" }

// The byte region SQLite's unix VFS locks in a main database file:
// PENDING_BYTE (0x40000000), RESERVED, and the 510-byte SHARED range.
const (
	sqliteLockFirst = 0x40000000
	sqliteLockLast  = sqliteLockFirst + 1 + 510
)

// sqliteMain reports whether the lock is one SQLite takes on a main file.
func (l lockEntry) sqliteMain() bool {
	return l.class == "POSIX" && l.start >= sqliteLockFirst && l.start <= sqliteLockLast
}

// linuxMkdev is unix.Mkdev on Linux, the encoding stat(2) reports there;
// the lock table only exists on Linux, and the parser is tested anywhere.
func linuxMkdev(major, minor uint64) uint64 {
	return (minor & 0xff) | (major&0xfff)<<8 | (minor&^0xff)<<12 | (major&^0xfff)<<32
}

// parseLockLine parses "1: POSIX  ADVISORY  READ 10662 fe:00:10023009
// 1073741826 1073742335" (and "1: -> POSIX ..." for a waiter). ok is false
// for anything else.
func parseLockLine(line []byte) (l lockEntry, ok bool) {
	f := bytes.Fields(line)
	if len(f) < 2 || !bytes.HasSuffix(f[0], []byte(":")) {
		return l, false
	}
	f = f[1:]
	if string(f[0]) == "->" {
		l.waiter, f = true, f[1:]
	}
	// class, mode (ADVISORY, ACTIVE, BREAKING, ...), type, pid, dev:ino, start, end
	if len(f) < 7 {
		return l, false
	}
	l.class = string(f[0])
	l.write = string(f[2]) == "WRITE"
	pid, err := strconv.Atoi(string(f[3]))
	if err != nil {
		return l, false
	}
	l.pid = pid
	parts := bytes.Split(f[4], []byte(":"))
	if len(parts) != 3 {
		return l, false
	}
	maj, err1 := strconv.ParseUint(string(parts[0]), 16, 32)
	mnr, err2 := strconv.ParseUint(string(parts[1]), 16, 32)
	ino, err3 := strconv.ParseUint(string(parts[2]), 10, 64)
	start, err4 := strconv.ParseUint(string(f[5]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return l, false
	}
	l.id = fileid.ID{Dev: linuxMkdev(maj, mnr), Ino: ino}
	l.start, l.end = start, math.MaxUint64
	if string(f[6]) != "EOF" {
		if l.end, err = strconv.ParseUint(string(f[6]), 10, 64); err != nil {
			return l, false
		}
	}
	return l, true
}

// parseFDInfo reads what the scan needs of /proc/<pid>/fdinfo/<fd>: the
// open flags, the mount id, and the locks on the file.
func parseFDInfo(b []byte) (flags uint64, mntID int, locks []lockEntry, err error) {
	mntID = -1
	haveFlags := false
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		key, val, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		val = bytes.TrimSpace(val)
		switch string(key) {
		case "flags":
			if flags, err = strconv.ParseUint(string(val), 8, 64); err != nil {
				return 0, -1, nil, fmt.Errorf("bad flags line %q", line)
			}
			haveFlags = true
		case "mnt_id":
			if mntID, err = strconv.Atoi(string(val)); err != nil {
				return 0, -1, nil, fmt.Errorf("bad mnt_id line %q", line)
			}
		case "lock":
			if l, ok := parseLockLine(val); ok {
				locks = append(locks, l)
			}
		}
	}
	if !haveFlags {
		return 0, -1, nil, fmt.Errorf("no flags in fdinfo")
	}
	return flags, mntID, locks, nil
}

// openForWrite reports whether open(2) flags allow writing.
func openForWrite(flags uint64) bool {
	acc := flags & 3 // O_ACCMODE
	return acc == 1 || acc == 2
}

// lockTable is the part of /proc/locks one scan needs.
type lockTable struct {
	err error // the table could not be read: no evidence either way
	// on holds every lock on a watched inode, by stat(2) identity.
	on map[fileid.ID][]lockEntry
	// byPid holds the POSIX (and pid-bearing) locks on watched inodes.
	byPid map[int][]lockEntry
	// mains maps a pid to every inode, watched or not, on which it holds
	// a lock in SQLite's main-file lock region.
	mains map[int][]fileid.ID
}

func newLockTable(b []byte, w *watch) *lockTable {
	t := &lockTable{on: map[fileid.ID][]lockEntry{}, byPid: map[int][]lockEntry{}, mains: map[int][]fileid.ID{}}
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		l, ok := parseLockLine(line)
		if !ok {
			continue
		}
		l.id.Dev = w.statDev(l.id.Dev)
		if l.sqliteMain() && !l.waiter && !slices.Contains(t.mains[l.pid], l.id) {
			t.mains[l.pid] = append(t.mains[l.pid], l.id)
		}
		if !w.indexed(l.id) {
			continue
		}
		t.on[l.id] = append(t.on[l.id], l)
		if l.pid > 0 {
			t.byPid[l.pid] = append(t.byPid[l.pid], l)
		}
	}
	return t
}

// hasFileOwned reports whether any lock on a watched inode belongs to an
// open file description, which only the fdinfo of its fds can attribute.
func (t *lockTable) hasFileOwned() bool {
	for _, ls := range t.on {
		for _, l := range ls {
			if l.fileOwned() && !l.waiter {
				return true
			}
		}
	}
	return false
}

// fdLock is a file-owned lock seen in the fdinfo of one inspected fd.
type fdLock struct {
	pid, fd int
	lock    lockEntry
}

// lockKey is what tells two locks apart in the table: identical locks
// held through two different open file descriptions are two lines.
type lockKey struct {
	id         fileid.ID
	class      string
	write      bool
	start, end uint64
}

func keyOf(l lockEntry) lockKey {
	return lockKey{id: l.id, class: l.class, write: l.write, start: l.start, end: l.end}
}

// unattributed counts, per watched inode, the file-owned locks in the
// table that no inspected fd accounts for. An open file description's
// lock shows in the fdinfo of every fd sharing it (dup, fork), so fds are
// grouped by same (kcmp(2) on Linux) before counting; when same cannot
// tell, it must say true: counting too few descriptions only makes the
// result more cautious.
func (t *lockTable) unattributed(seen []fdLock, same func(a, b fdLock) bool) map[fileid.ID]int {
	want := map[lockKey]int{}
	for _, ls := range t.on {
		for _, l := range ls {
			if l.fileOwned() && !l.waiter {
				want[keyOf(l)]++
			}
		}
	}
	groups := map[lockKey][][]fdLock{}
	for _, s := range seen {
		k := keyOf(s.lock)
		if _, ok := want[k]; !ok {
			continue
		}
		gs := groups[k]
		i := slices.IndexFunc(gs, func(g []fdLock) bool { return same(g[0], s) })
		if i < 0 {
			gs = append(gs, []fdLock{s})
		} else {
			gs[i] = append(gs[i], s)
		}
		groups[k] = gs
	}
	out := map[fileid.ID]int{}
	for k, n := range want {
		if left := n - len(groups[k]); left > 0 {
			out[k.id] += left
		}
	}
	return out
}
