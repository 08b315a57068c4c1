package holders

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// fdPass says how readFDs treats one process's fds.
type fdPass struct {
	own     bool   // the scan's own mount namespace: link texts are the host's paths
	ns      uint64 // its mount namespace, which keys the path cache
	statAll bool   // stat every fd naming a path, and keep every regular file
	recheck []int  // fds the cache saw on a watched inode: stat whatever they say
}

// inspect looks at one process. Everything is read relative to one open
// /proc/<pid> directory, which stays bound to the process it was opened
// for: if the pid is recycled meanwhile, reads fail instead of mixing two
// processes' facts.
func (s *procScanner) inspect(pid int) {
	name := strconv.Itoa(pid)
	pd, err := unix.Openat(s.e.proc, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if !gone(err) {
			s.c.addBlind(Blind{Pid: pid, UID: -1, Reason: fmt.Sprintf("open /proc/%d: %v", pid, err)}, nil)
		}
		return
	}
	defer unix.Close(pd)
	pass := fdPass{own: true}
	if ns, err := mountNS(pd); err != nil || ns != s.e.selfNS {
		// Not ours, or not readable (then reading its fds fails too):
		// match by inode, never by our paths.
		pass.own, pass.ns = s.e.selfNS == 0 && err != nil, ns
	}
	if k, ok := s.e.known[pid]; ok {
		for _, f := range k.Files {
			if f.FD >= 0 {
				pass.recheck = append(pass.recheck, f.FD)
			}
		}
	}
	if !s.read(pd, pid, pass) {
		return
	}
	// A lock the table shows on a watched inode proves an open fd; when
	// the filters skipped it (an unlinked file outside the watched
	// directories), look at every fd.
	if s.missesLocked(pid) {
		pass.statAll = true
		if !s.read(pd, pid, pass) {
			return
		}
	}
	s.c.inspected[pid] = true
	s.dropReused(pd)
	s.fdDetails(pd, pid, pass.own)
	hs := s.w.match(s.obs)
	hs = s.inferMains(pd, pid, pass, hs)
	if len(hs) == 0 {
		return
	}
	s.addLockEvidence(pid, hs)
	p, err := s.describe(pd, pid)
	if err != nil {
		return // exited: it holds nothing any more
	}
	p.Inspected, p.ForeignMountNS = true, !pass.own
	s.c.add(p, hs)
}

// read collects the process's observations; false when it could not be
// inspected (recorded as blind) or is gone.
func (s *procScanner) read(pd, pid int, pass fdPass) bool {
	s.obs = s.obs[:0]
	if err := s.readFDs(pd, pass); err != nil {
		if !gone(err) {
			s.blind(pd, pid, fmt.Sprintf("read /proc/%d/fd: %v", pid, err))
		}
		return false
	}
	if err := s.readMaps(pd, pass.own); err != nil {
		if !gone(err) {
			s.blind(pd, pid, fmt.Sprintf("read /proc/%d/maps: %v", pid, err))
		}
		return false
	}
	return true
}

// blind records a process whose fds or maps cannot be read, unless it is
// a kernel thread (no fd table: never a holder, never listed).
func (s *procScanner) blind(pd, pid int, reason string) {
	if st, err := readStatAt(pd); err == nil && st.Kthread() {
		return
	}
	uid := -1
	var st unix.Stat_t
	if unix.Fstat(pd, &st) == nil {
		// /proc/<pid> is owned by the process's effective uid (root when
		// it is not dumpable, which only widens what counts).
		uid = int(st.Uid)
	}
	// status stays readable when fd and maps are not. Read it now, while
	// pd still names this process: its uid decides the rule's scope and
	// its groups whether group permissions let it open a store.
	var groups []int
	known := false
	if b, err := readAt(pd, "status", nil); err == nil {
		if euid, g, err := parseStatusIDs(b); err == nil {
			uid, groups, known = euid, g, true
		}
	}
	s.c.addBlind(Blind{Pid: pid, UID: uid, Reason: reason}, func() ([]int, bool) { return groups, known })
}

func (s *procScanner) readFDs(pd int, pass fdPass) error {
	fdd, err := unix.Openat(pd, "fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fdd)
	// Listing the fd directory can succeed where reading the links fails
	// (a process with capabilities beyond ours): that is a blind process
	// too, not an empty one.
	var linkErr error
	err = readDirNames(fdd, s.dents, func(name []byte) {
		fd, ok := parseInt(name)
		if !ok || linkErr != nil {
			return
		}
		fdName := fdString(fd)
		n, err := unix.Readlinkat(fdd, fdName, s.link)
		if err != nil {
			if err != unix.ENOENT { // ENOENT: closed since getdents
				linkErr = err
			}
			return
		}
		text := s.link[:n]
		if len(text) == 0 || text[0] != '/' {
			return // socket:[...], pipe:[...], anon_inode:...
		}
		path := trimDeleted(text)
		o, ok, err := s.statFD(fdd, fdName, fd, path, len(path) != len(text), pass)
		if err != nil {
			linkErr = err
		} else if ok {
			s.obs = append(s.obs, o)
		}
	})
	if err != nil {
		return err
	}
	return linkErr
}

// statFD decides whether one fd needs a stat and keeps it when it could
// be a store's file. In the scan's own namespace a path in a watched
// directory is always stat'ed; any other linked path once per scan (the
// path cache), so a main renamed anywhere is still found by inode; an
// unlinked file outside the watched directories only under a role's name.
// In another namespace every path is stat'ed (linked ones once per
// namespace).
func (s *procScanner) statFD(fdd int, fdName string, fd int, path []byte, deleted bool, pass fdPass) (observation, bool, error) {
	forced := pass.statAll || slices.Contains(pass.recheck, fd)
	cand := pass.own && s.w.candidate(path)
	cacheable := !deleted && !cand && !forced
	if cacheable {
		if f, ok := s.pathCache(pass.ns)[string(path)]; ok {
			return s.observe(fd, path, f, pass)
		}
	} else if deleted && pass.own && !cand && !forced && !s.w.roleBase(path) {
		return observation{}, false, nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(fdd, fdName, &st, 0); err != nil {
		if err == unix.ENOENT {
			return observation{}, false, nil
		}
		return observation{}, false, err
	}
	f := statFacts{id: fileid.FromStat(&st), nlink: uint64(st.Nlink), owner: int(st.Uid), regular: st.Mode&unix.S_IFMT == unix.S_IFREG}
	if cacheable {
		s.pathCache(pass.ns)[string(path)] = f
	}
	return s.observe(fd, path, f, pass)
}

func (s *procScanner) pathCache(ns uint64) map[string]statFacts {
	m, ok := s.paths[ns]
	if !ok {
		m = make(map[string]statFacts)
		s.paths[ns] = m
	}
	return m
}

// observe keeps a regular file that could match: an indexed inode, or a
// name the name rule could use (in our namespace, a role's name in a
// watched directory; in another, a role's name, judged once its host path
// is known).
func (s *procScanner) observe(fd int, path []byte, f statFacts, pass fdPass) (observation, bool, error) {
	if !f.regular {
		return observation{}, false, nil // a FIFO, socket or device is nobody's store
	}
	indexed := s.w.indexed(f.id)
	byName := s.w.roleBase(path) && (!pass.own || s.w.candidate(path))
	if !indexed && !byName && !pass.statAll {
		return observation{}, false, nil
	}
	return observation{path: string(path), fd: fd, id: f.id, nlink: f.nlink, nlinkKnown: true, owner: f.owner, ownerKnown: true, own: pass.own}, true, nil
}

// dropReused drops the observations of an inode that an earlier
// generation had but that was born since: the number was freed and
// reused for an unrelated file. The same goes for a current file seen
// under a name none of its roles has: the file at the path when the scan
// lstat'ed it may have been unlinked since and its number reused (a
// profile's -wal removed by its closer, the next profile's state.db
// created) before this process was read. Only those inodes cost a statx.
// An earlier generation's inode nobody pins must prove its birth time:
// one the statx cannot read (closed since, no btime) is dropped, never
// guessed.
func (s *procScanner) dropReused(pd int) {
	kept := s.obs[:0]
	for _, o := range s.obs {
		if s.verifyBirth(pd, &o) {
			kept = append(kept, o)
		}
	}
	s.obs = kept
}

// verifyBirth reports whether o may be an earlier generation's inode
// (always, for an inode not indexed as one): pinned and of no other
// birth, or of exactly the known birth. It sets o.birth to the birth it
// read, so the cache can still tell the inode once the pin is gone.
func (s *procScanner) verifyBirth(pd int, o *observation) bool {
	want, pinned, ok := s.w.pastBirth(o.id)
	if !ok {
		cur, elsewhere := s.w.currentElsewhere(*o)
		if !elsewhere {
			return true
		}
		got, read := s.birthOf(pd, o)
		return !read || got == 0 || got == cur
	}
	got, read := s.birthOf(pd, o)
	if !read {
		o.birth = want
		return pinned
	}
	o.birth = got
	if pinned {
		return got == 0 || want == 0 || got == want
	}
	return got == want
}

// birthOf reads the birth time of the file o names in pd (read false
// when it is gone or is another inode by now).
func (s *procScanner) birthOf(pd int, o *observation) (int64, bool) {
	name := "map_files/" + o.mapRange // root only; else unverified
	if o.fd >= 0 {
		name = "fd/" + fdString(o.fd)
	}
	var stx unix.Statx_t
	if unix.Statx(pd, name, 0, unix.STATX_INO|unix.STATX_BTIME, &stx) != nil || stx.Ino != o.id.Ino {
		return 0, false
	}
	return statxBirth(&stx), true
}

// missesLocked reports whether the lock table shows pid holding a lock on
// a watched inode that no observation covers.
func (s *procScanner) missesLocked(pid int) bool {
	for _, l := range s.e.locks.byPid[pid] {
		if !slices.ContainsFunc(s.obs, func(o observation) bool { return o.id == l.id }) {
			return true
		}
	}
	return false
}

// fdDetails reads /proc/<pid>/fdinfo of every fd that may match: its
// access mode (can it write?), the locks its open file description holds
// (to account for OFD locks, which /proc/locks shows without a pid), and,
// in another mount namespace, its mount, for the host's view of the path.
func (s *procScanner) fdDetails(pd, pid int, own bool) {
	var theirs []mountEntry
	read := false
	for i := range s.obs {
		o := &s.obs[i]
		if o.fd < 0 || !s.matchable(o) {
			continue
		}
		b, err := readAt(pd, "fdinfo/"+fdString(o.fd), s.buf)
		if err != nil {
			continue // closed since: the holding is stale anyway
		}
		s.buf = b[:0]
		flags, mntID, locks, err := parseFDInfo(b)
		if err != nil {
			continue
		}
		o.fdWrite = openForWrite(flags)
		for _, l := range locks {
			l.id.Dev = s.w.statDev(l.id.Dev)
			if l.fileOwned() {
				s.c.fileLocks = append(s.c.fileLocks, fdLock{pid: pid, fd: o.fd, lock: l})
			}
		}
		if !own && mntID >= 0 {
			o.host = s.hostPath(o.path, mntID, s.mountsOf(pd, &theirs, &read))
		}
	}
}

// matchable: the inode is indexed, or the name rule may apply.
func (s *procScanner) matchable(o *observation) bool {
	if s.w.indexed(o.id) {
		return true
	}
	return s.w.roleBase([]byte(o.path))
}

// inferMains finds the main of a generation renamed aside under a live
// connection when nothing else names it: a process holding a store's -wal
// or -shm but no main of that store has the main it opened elsewhere.
// It is the SQLite main file (header, WAL mode) it holds a POSIX lock on
// in SQLite's lock region, and that is not paired by name with sidecars
// of its own (another database of the same process).
func (s *procScanner) inferMains(pd, pid int, pass fdPass, hs []holding) []holding {
	var need []int
	for i := range s.w.targets {
		side, main := false, false
		for _, h := range hs {
			if h.store == i {
				side = side || h.held.Role != RoleMain
				main = main || h.held.Role == RoleMain
			}
		}
		if side && !main {
			need = append(need, i)
		}
	}
	locked := s.e.locks.mains[pid]
	if len(need) == 0 || len(locked) == 0 {
		return hs
	}
	pass.statAll = true
	if !s.read(pd, pid, pass) {
		return hs
	}
	for _, o := range s.obs {
		if indexed := s.w.indexed(o.id); indexed || o.fd < 0 || !slices.Contains(locked, o.id) ||
			pairedByName(o, s.obs) || !walMainAt(pd, o.fd) {
			continue
		}
		o.fdWrite = s.fdWritable(pd, o.fd)
		for _, i := range need {
			h := s.w.held(o, i, RoleMain, false, MatchSQLite, "")
			h.Evidence = append(h.Evidence, EvidenceLock)
			hs = mergeHolding(hs, holding{store: i, held: h})
		}
	}
	return hs
}

// addLockEvidence marks the holdings pid also holds a lock on.
func (s *procScanner) addLockEvidence(pid int, hs []holding) {
	for _, l := range s.e.locks.byPid[pid] {
		for i := range hs {
			if h := &hs[i].held; h.ID == l.id && !h.has(EvidenceLock) {
				h.Evidence = append(h.Evidence, EvidenceLock)
			}
		}
	}
}

// pairedByName reports whether o has sidecars of its own among obs.
func pairedByName(o observation, obs []observation) bool {
	return slices.ContainsFunc(obs, func(p observation) bool {
		return p.path == o.path+"-wal" || p.path == o.path+"-shm"
	})
}

func (s *procScanner) fdWritable(pd, fd int) bool {
	b, err := readAt(pd, "fdinfo/"+fdString(fd), s.buf)
	if err != nil {
		return false
	}
	s.buf = b[:0]
	flags, _, _, err := parseFDInfo(b)
	return err == nil && openForWrite(flags)
}

// walMainAt reads the first 100 bytes through /proc/<pid>/fd/<fd>: a
// SQLite database in WAL mode (file format versions 2 at bytes 18, 19).
// The open never blocks (the fd was stat'ed a regular file) and this
// process holds no POSIX lock on an inode that is no store's.
func walMainAt(pd, fd int) bool {
	f, err := unix.Openat(pd, "fd/"+fdString(fd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return false
	}
	defer unix.Close(f)
	var st unix.Stat_t
	if unix.Fstat(f, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	var h [100]byte
	n, err := unix.Pread(f, h[:], 0)
	return err == nil && n == len(h) && bytes.HasPrefix(h[:], []byte("SQLite format 3\x00")) && h[18] == 2 && h[19] == 2
}
