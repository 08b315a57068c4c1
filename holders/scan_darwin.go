package holders

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// On macOS the scan lists every pid with proc_listpids, each process's
// fds with PROC_PIDLISTFDS, and asks PROC_PIDFDVNODEPATHINFO for every
// file fd, which returns path, device, inode, link count and open flags
// in one call, so every file fd is matched by inode. Mappings are not
// inspected: SQLite keeps an fd on every file it maps. The path of an
// unlinked vnode may be empty, so an orphan whose name is gone is found
// only by identity; the supervisor pins every current generation on
// macOS for that reason.
//
// Other users' processes refuse PROC_PIDLISTFDS unless the scan runs as
// root, and macOS has no system-wide lock table an unprivileged process
// may read (fcntl F_GETLK names one lock owner at a time and cannot show
// that no hidden holder stands behind a visible one). So RuleLocks has no
// evidence to clear them with: a LaunchAgent's scan counts every
// uninspectable process that could open the store as under RuleStrict,
// and is unknown while one exists; the LaunchDaemon (root) sees all.

func scanAll(targets []Target, known map[int]Process, o Options) (*Result, error) {
	start := time.Now()
	n := procListPids(nil)
	if n <= 0 {
		return nil, fmt.Errorf("proc_listpids: no answer (%d)", n)
	}
	// Room for processes started since the estimate.
	buf := make([]byte, n+64*4)
	n = procListPids(buf)
	if n <= 0 {
		return nil, fmt.Errorf("proc_listpids: no answer (%d)", n)
	}
	s := newDarwinScanner(targets, known, o)
	for _, pid := range decodePids(buf[:n]) {
		if pid != s.self {
			s.inspect(pid)
		}
	}
	res := s.c.result()
	res.Took = time.Since(start)
	return res, nil
}

func scanPids(targets []Target, pids []int, known map[int]Process, o Options) (*Result, error) {
	start := time.Now()
	s := newDarwinScanner(targets, known, o)
	for _, pid := range pids {
		if pid != s.self {
			s.inspect(pid)
		}
	}
	res := s.c.result()
	res.Took = time.Since(start)
	return res, nil
}

type darwinScanner struct {
	w     *watch
	c     *collector
	known map[int]Process
	self  int
	fds   []byte
	vnode []byte
	bsd   []byte
	obs   []observation
}

func newDarwinScanner(targets []Target, known map[int]Process, o Options) *darwinScanner {
	w := watchFor(targets, o)
	return &darwinScanner{
		w: w, c: newCollector(w, o, os.Geteuid()), known: known, self: os.Getpid(),
		fds: make([]byte, 256*procFDInfoSize), vnode: make([]byte, vnodeFDInfoWithPathSize),
		bsd: make([]byte, procBSDInfoSize),
	}
}

// exists tells a process that is gone from one we may not look at, since
// libproc's failures carry no errno here.
func exists(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

func (s *darwinScanner) bsdInfo(pid int) (bsdInfo, bool) {
	if procPidInfo(pid, procPidTBSDInfo, s.bsd) != procBSDInfoSize {
		return bsdInfo{}, false
	}
	info, err := decodeBSDInfo(s.bsd)
	return info, err == nil && info.Pid == pid
}

func (s *darwinScanner) inspect(pid int) {
	info, ok := s.bsdInfo(pid)
	if !ok && !exists(pid) {
		return
	}
	uid := -1
	if ok {
		uid = info.UID
	}
	need := procPidInfo(pid, procPidListFDs, nil)
	if need > len(s.fds) {
		s.fds = make([]byte, need+32*procFDInfoSize)
	}
	n := 0
	if need > 0 {
		n = procPidInfo(pid, procPidListFDs, s.fds)
	}
	if n <= 0 {
		err := unix.Kill(pid, 0)
		switch {
		case errors.Is(err, unix.ESRCH):
			return
		case err == nil && need == 0 && n == 0 && os.Geteuid() == 0:
			return // no fds at all
		}
		s.c.addBlind(Blind{Pid: pid, UID: uid, Reason: "proc_pidinfo(PROC_PIDLISTFDS) refused: not permitted"}, nil)
		return
	}
	s.obs = s.obs[:0]
	for _, fd := range decodeFDs(s.fds[:n]) {
		if fd.Type != proxFDTypeVnode {
			continue
		}
		if procPidFDInfo(pid, fd.FD, procPidFDVnodePathInfo, s.vnode) != vnodeFDInfoWithPathSize {
			continue // closed since the listing
		}
		v, err := decodeVnodeFDInfoWithPath(s.vnode)
		if err != nil || v.Mode&syscall.S_IFMT != syscall.S_IFREG {
			continue
		}
		o := observation{path: v.Path, fd: fd.FD, id: v.ID, nlink: v.Nlink, nlinkKnown: true, own: true,
			fdWrite: v.OpenFlags&fWrite != 0}
		if _, pinned, past := s.w.pastBirth(o.id); past && !pinned {
			// An earlier generation's inode nobody pins: the vnode info
			// carries no birth time to tell it from a file that reused
			// the number, and a holder found by it could be killed.
			continue
		}
		if s.w.wanted(&o) {
			s.obs = append(s.obs, o)
		}
	}
	s.c.inspected[pid] = true
	hs := s.w.match(s.obs)
	if len(hs) == 0 {
		return
	}
	if !ok {
		s.c.addBlind(Blind{Pid: pid, UID: uid, Reason: "holds a watched file but proc_pidinfo(PROC_PIDTBSDINFO) failed: its start time is unknown"}, nil)
		return
	}
	p := Process{Pid: pid, StartTicks: info.StartMicros, StartTime: time.UnixMicro(int64(info.StartMicros)), UID: info.RUID, Inspected: true}
	if k, found := s.known[pid]; found && k.StartTicks == p.StartTicks {
		p.User, p.Exe, p.Cmdline = k.User, k.Exe, k.Cmdline
	} else {
		processMeta(&p)
		p.UID = info.RUID
		if again, ok := s.bsdInfo(pid); !ok || again.StartMicros != info.StartMicros {
			return // exited or recycled while gopsutil looked
		}
	}
	s.c.add(p, hs)
}

// wanted reports whether an observation could match anything: its inode
// is indexed, or its name could make it an orphan by the name rule.
func (w *watch) wanted(o *observation) bool {
	if w.indexed(o.id) {
		return true
	}
	return w.roleBase([]byte(o.path))
}
