package holders

import (
	"fmt"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// finish turns the lock table into evidence once every process has been
// inspected: a process the scan could not inspect that holds a POSIX lock
// on a watched inode is a holder (role and current or orphan from the
// inode); one that was not listed when the scan started is inspected now;
// and with account, the file-owned locks (OFD, flock) the fdinfo of no
// inspected fd explains are recorded per store, for the rule.
func (e *scanEnv) finish(c *collector, account bool) {
	c.locks = e.locks
	if e.locks.err != nil {
		return
	}
	blind := map[int]bool{}
	for _, b := range c.blind {
		if b.Pid > 0 {
			blind[b.Pid] = true
		}
	}
	late := newProcScanner(e, c)
	defer late.release()
	for pid, ls := range e.locks.byPid {
		if pid == e.self || c.inspected[pid] {
			continue
		}
		if !blind[pid] {
			// Not listed at the start: started since, or hidden by hidepid.
			n := len(c.blind)
			late.inspect(pid)
			if c.inspected[pid] {
				continue
			}
			if len(c.blind) == n && !e.hidepid {
				continue // gone: it holds nothing any more
			}
		}
		e.addLockHolder(c, pid, ls)
	}
	if account && e.locks.hasFileOwned() {
		seen := append(c.fileLocks, e.selfFileLocks()...)
		e.explain(c, e.locks.unattributed(seen, sameFile))
	}
}

// addLockHolder records pid, which could not be inspected, as a holder of
// every watched inode it locks. A lock on an earlier generation's inode
// alone, with no other lock on that store, may be on an unrelated file
// that got the freed number (no fd to check its birth by): it is not
// taken for a holding, and counts as a lock nobody accounts for.
func (e *scanEnv) addLockHolder(c *collector, pid int, ls []lockEntry) {
	locked := map[int][]fileid.ID{} // per store, the distinct inodes pid locks
	for _, l := range ls {
		for _, r := range e.w.refs(l.id) {
			if !slices.Contains(locked[r.store], l.id) {
				locked[r.store] = append(locked[r.store], l.id)
			}
		}
	}
	var hs []holding
	for _, l := range ls {
		for _, r := range e.w.refs(l.id) {
			if !r.current && len(locked[r.store]) == 1 {
				c.addUnexplained(r.store, fmt.Sprintf("pid %d, which this scan cannot inspect, locks only the inode %v an earlier generation's %s had; that number may since belong to another file", pid, l.id, r.role))
				continue
			}
			h := Held{Role: r.role, HostPath: r.path, FD: -1, Owner: -1, ID: l.id, Current: r.current, Match: MatchInode,
				Evidence: []Evidence{EvidenceLock}, Access: AccessUnknown}
			if r.current {
				h.Nlink = e.w.stats[r.store].cur.Of(r.role).Nlink
				h.Owner = e.w.stats[r.store].cur.Of(r.role).UID
			}
			// A write lock needs an fd open for writing.
			if l.write && !l.fileOwned() {
				h.FDWrite = true
				if h.Role != RoleSHM {
					h.Access = AccessWrite
				}
			}
			hs = mergeHolding(hs, holding{store: r.store, held: h})
		}
	}
	if len(hs) > 0 {
		c.add(e.describeUninspected(pid), hs)
	}
}

// describeUninspected reads what /proc still shows of a process whose
// fds it may not read: its start time (for safe signalling), uids and
// command line. A process hidden by hidepid is known by its pid only.
func (e *scanEnv) describeUninspected(pid int) Process {
	p := Process{Pid: pid, UID: -1}
	pd, err := unix.Openat(e.proc, strconv.Itoa(pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return p
	}
	defer unix.Close(pd)
	st, err := readStatAt(pd)
	if err != nil {
		return p
	}
	p.StartTicks, p.StartTime = st.StartTicks, ticksTime(st.StartTicks)
	if b, err := readAt(pd, "status", nil); err == nil {
		p.NSPid = parseNSPid(b)
	}
	processMeta(&p)
	if st2, err := readStatAt(pd); err != nil || st2.StartTicks != st.StartTicks {
		return Process{Pid: pid, UID: -1}
	}
	return p
}

// selfFileLocks lists the file-owned locks on watched inodes that this
// process holds (the agent's guard and pins, its own SQLite connections),
// which the scan of other processes never sees.
func (e *scanEnv) selfFileLocks() []fdLock {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var out []fdLock
	for _, ent := range ents {
		fd, ok := parseInt([]byte(ent.Name()))
		if !ok {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			continue
		}
		if !e.w.indexed(fileid.FromStat(&st)) {
			continue
		}
		b, err := os.ReadFile("/proc/self/fdinfo/" + ent.Name())
		if err != nil {
			continue
		}
		_, _, locks, err := parseFDInfo(b)
		if err != nil {
			continue
		}
		for _, l := range locks {
			l.id.Dev = e.w.statDev(l.id.Dev)
			if l.fileOwned() {
				out = append(out, fdLock{pid: e.self, fd: fd, lock: l})
			}
		}
	}
	return out
}

// kcmpFile is KCMP_FILE of <linux/kcmp.h>.
const kcmpFile = 0

// sameFile reports whether two fds share one open file description. When
// the kernel cannot say (no kcmp, no permission) it says yes, which only
// makes the accounting more cautious.
func sameFile(a, b fdLock) bool {
	if a.pid == b.pid && a.fd == b.fd {
		return true
	}
	r, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(a.pid), uintptr(b.pid), kcmpFile, uintptr(a.fd), uintptr(b.fd), 0)
	return errno != 0 || r == 0
}

// explain records, per store, the file-owned locks nobody inspected
// accounts for.
func (e *scanEnv) explain(c *collector, left map[fileid.ID]int) {
	for id, n := range left {
		for _, r := range e.w.refs(id) {
			c.addUnexplained(r.store, fmt.Sprintf(
				"%d OFD or flock lock(s) on the %s inode %v belong to no fd this scan could read (/proc/locks shows no owner)", n, r.role, id))
		}
	}
}
