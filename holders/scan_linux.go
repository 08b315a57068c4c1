package holders

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// lstatFile is lstat(2) through statx, which also gives the birth time
// (0 where the filesystem keeps none).
func lstatFile(path string) (fileid.State, int64, error) {
	return statxAt(unix.AT_FDCWD, path, path)
}

// lstatFileAt is lstatFile of name in the directory fd (dir is its path,
// for messages), so no component of a path is looked up by name again.
func lstatFileAt(fd int, dir, name string) (fileid.State, int64, error) {
	return statxAt(fd, name, dir+"/"+name)
}

func statxAt(fd int, name, path string) (fileid.State, int64, error) {
	var stx unix.Statx_t
	err := unix.Statx(fd, name, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &stx)
	if err != nil {
		return fileid.State{}, 0, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	st := fileid.State{Exists: true, ID: fileid.ID{Dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor), Ino: stx.Ino},
		Nlink: uint64(stx.Nlink), Mode: fileid.ModeOf(uint32(stx.Mode)), UID: int(stx.Uid), GID: int(stx.Gid)}
	return st, statxBirth(&stx), nil
}

// statxBirth is the birth time in ns, 0 when not reported.
func statxBirth(stx *unix.Statx_t) int64 {
	if stx.Mask&unix.STATX_BTIME == 0 {
		return 0
	}
	return stx.Btime.Sec*1e9 + int64(stx.Btime.Nsec)
}

func scanAll(targets []Target, known map[int]Process, o Options) (*Result, error) {
	start := time.Now()
	proc, err := openProc()
	if err != nil {
		return nil, err
	}
	defer unix.Close(proc)
	e := newScanEnv(watchFor(targets, o), proc, known, o)
	pids, err := listPids(proc, make([]byte, 32<<10))
	if err != nil {
		return nil, err
	}
	c := inspectAll(e, pids)
	if e.hidepid {
		c.addBlind(Blind{UID: -1, Scope: ScopeScan, Reason: e.hideReason}, nil)
	}
	e.finish(c, true)
	res := c.result()
	res.Took = time.Since(start)
	return res, nil
}

// scanPids inspects only pids, plus every process the lock table shows
// holding a lock on a watched inode (a SQLite connection opened since the
// caller last looked).
func scanPids(targets []Target, pids []int, known map[int]Process, o Options) (*Result, error) {
	start := time.Now()
	proc, err := openProc()
	if err != nil {
		return nil, err
	}
	defer unix.Close(proc)
	e := newScanEnv(watchFor(targets, Options{Known: o.Known, reuse: o.reuse, last: o.last}), proc, known, o)
	want := slices.Clone(pids)
	for pid := range e.locks.byPid {
		want = append(want, pid)
	}
	slices.Sort(want)
	want = slices.Compact(want)
	s := newProcScanner(e, newCollector(e.w, o, e.euid))
	defer s.release()
	for _, pid := range want {
		if pid != e.self {
			s.inspect(pid)
		}
	}
	e.finish(s.c, false)
	res := s.c.result()
	res.Took = time.Since(start)
	return res, nil
}

func openProc() (int, error) {
	proc, err := unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /proc: %w (is procfs mounted?)", err)
	}
	return proc, nil
}

// scanEnv is what every worker of one scan shares, read-only while they
// run.
type scanEnv struct {
	w       *watch
	proc    int
	known   map[int]Process
	opts    Options
	euid    int
	self    int
	selfNS  uint64 // the scan's mount namespace (inode of /proc/self/ns/mnt)
	hidepid bool   // /proc hides processes from this (unprivileged) scan
	// hideReason says how, for the scan's Blind entry.
	hideReason string
	locks      *lockTable
	// hostMounts is the scan's own mount table, read when first needed.
	hostMounts func() []mountEntry
}

func newScanEnv(w *watch, proc int, known map[int]Process, o Options) *scanEnv {
	e := &scanEnv{w: w, proc: proc, known: known, opts: o, euid: os.Geteuid(), self: os.Getpid()}
	e.selfNS, _ = selfMountNS()
	if e.euid != 0 {
		e.hideReason = hiddenByProc()
		e.hidepid = e.hideReason != ""
	}
	e.hostMounts = sync.OnceValue(func() []mountEntry {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return nil
		}
		return parseMountinfo(b)
	})
	b, err := readAt(proc, "locks", nil)
	if err != nil {
		e.locks = &lockTable{err: err}
	} else {
		e.locks = newLockTable(b, w)
	}
	return e
}

// inspectAll spreads the pids over one worker per CPU: the scan's cost is
// almost all system calls into procfs, which run in parallel.
func inspectAll(e *scanEnv, pids []int) *collector {
	workers := min(runtime.GOMAXPROCS(0), 8, max(len(pids)/64, 1))
	scanners := make([]*procScanner, workers)
	var next atomic.Int64
	var wg sync.WaitGroup
	const chunk = 16
	for i := range scanners {
		s := newProcScanner(e, newCollector(e.w, e.opts, e.euid))
		scanners[i] = s
		wg.Go(func() {
			for {
				j := int(next.Add(chunk)) - chunk
				if j >= len(pids) {
					return
				}
				for _, pid := range pids[j:min(j+chunk, len(pids))] {
					s.inspect(pid)
				}
			}
		})
	}
	wg.Wait()
	for _, s := range scanners {
		s.release()
	}
	c := scanners[0].c
	for _, s := range scanners[1:] {
		c.merge(s.c)
	}
	return c
}

// procScanner walks /proc with reusable buffers: every process costs a
// stat of its mount namespace, a getdents and a readlink per fd, and a
// stat only for the links that point into a watched directory, name a
// path it has not seen in that namespace yet, or live in another mount
// namespace.
type procScanner struct {
	e     *scanEnv
	w     *watch
	c     *collector
	dents []byte
	link  []byte
	buf   []byte
	obs   []observation
	maps  []mapSeen
	names map[fileid.ID]bool // per scan: is a mapped inode's path a candidate (own namespace)
	// paths caches, per mount namespace, what a linked (not deleted)
	// path names: one path is one dentry at a time, so one stat per
	// path and scan tells every process of that namespace.
	paths map[uint64]map[string]statFacts
}

// statFacts is what a stat of an fd says.
type statFacts struct {
	id      fileid.ID
	nlink   uint64
	owner   int // st_uid
	regular bool
}

// hiddenByProc says why this (unprivileged) scan may not see every
// process, or "" when /proc lists them all.
func hiddenByProc() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "cannot read /proc/self/mountinfo to tell whether /proc hides processes: " + err.Error() + "; scan as root"
	}
	if m, ok := ParseProcMount(b); ok && m.Hides() {
		return "/proc is mounted with hidepid=" + m.HidePID + ": other users' processes, and this user's undumpable ones, are not listed; scan as root"
	}
	return ""
}

// scanBuffers are a scanner's reusable buffers, pooled so a targeted scan
// does not allocate 100 KiB each time.
type scanBuffers struct {
	dents, link, buf []byte
}

var bufferPool = sync.Pool{New: func() any {
	return &scanBuffers{
		dents: make([]byte, 32<<10), link: make([]byte, unix.PathMax+len(deletedSuffix)),
		buf: make([]byte, 64<<10),
	}
}}

func newProcScanner(e *scanEnv, c *collector) *procScanner {
	b := bufferPool.Get().(*scanBuffers)
	return &procScanner{
		e: e, w: e.w, c: c,
		dents: b.dents, link: b.link, buf: b.buf, names: make(map[fileid.ID]bool),
		paths: make(map[uint64]map[string]statFacts),
	}
}

// release returns the buffers; s must not be used after.
func (s *procScanner) release() {
	bufferPool.Put(&scanBuffers{dents: s.dents, link: s.link, buf: s.buf[:0]})
	s.dents, s.link, s.buf = nil, nil, nil
}

func listPids(proc int, buf []byte) ([]int, error) {
	self := os.Getpid()
	var pids []int
	err := readDirNames(proc, buf, func(name []byte) {
		if pid, ok := parseInt(name); ok && pid != self {
			pids = append(pids, pid)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	return pids, nil
}

// readDirNames calls fn with every entry name of the freshly opened
// directory fd, reading it with getdents directly so no name is allocated.
func readDirNames(fd int, buf []byte, fn func(name []byte)) error {
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		for b := buf[:n]; len(b) >= 19; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return fmt.Errorf("bad dirent record length %d", reclen)
			}
			name := b[19:reclen]
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			if len(name) > 0 && name[0] != '.' {
				fn(name)
			}
			b = b[reclen:]
		}
	}
}

func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH)
}

// readAt reads a whole /proc file relative to dirfd into buf (grown as
// needed); procfs files report size 0, so it reads until EOF.
func readAt(dirfd int, name string, buf []byte) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if cap(buf) == 0 {
		buf = make([]byte, 0, 4096)
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// describe fills a holder's metadata. The start time is read through pd,
// the same process whose fds were just read; gopsutil (by pid) supplies the
// rest, and a second read through pd proves the pid was not recycled while
// it did.
func (s *procScanner) describe(pd, pid int) (Process, error) {
	st, err := readStatAt(pd)
	if err != nil {
		return Process{}, err
	}
	p := Process{Pid: pid, StartTicks: st.StartTicks, StartTime: ticksTime(st.StartTicks), UID: -1}
	if k, ok := s.e.known[pid]; ok && k.StartTicks == st.StartTicks {
		p.UID, p.User, p.Exe, p.Cmdline, p.NSPid = k.UID, k.User, k.Exe, k.Cmdline, k.NSPid
		return p, nil
	}
	if b, err := readAt(pd, "status", s.buf); err == nil {
		p.NSPid = parseNSPid(b)
		s.buf = b[:0]
	}
	processMeta(&p)
	if st2, err := readStatAt(pd); err != nil || st2.StartTicks != st.StartTicks {
		return Process{}, ErrProcessGone
	}
	return p, nil
}

func readStatAt(pd int) (procStat, error) {
	var b [512]byte
	buf, err := readAt(pd, "stat", b[:0])
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(buf)
}

var fdNames = sync.OnceValue(func() []string {
	s := make([]string, 1024)
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
})

// fdString avoids allocating the names of the common small fds.
func fdString(fd int) string {
	if t := fdNames(); fd < len(t) {
		return t[fd]
	}
	return strconv.Itoa(fd)
}

// userHZ is the kernel's USER_HZ, which /proc reports ticks in: 100 on
// every Linux architecture Go supports.
const userHZ = 100

// bootTime is when the system booted, to the microsecond: the wall clock
// less CLOCK_BOOTTIME (the clock /proc's start ticks count on). /proc/stat's
// btime is whole seconds, which put every start time up to a second early
// (a rewritten main's cut is taken from its rewriter's start).
var bootTime = sync.OnceValue(func() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err == nil {
		return time.Now().Add(-time.Duration(ts.Nano()))
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			if sec, err := strconv.ParseInt(v, 10, 64); err == nil {
				return time.Unix(sec, 0)
			}
		}
	}
	return time.Time{}
})

func ticksTime(ticks uint64) time.Time {
	bt := bootTime()
	if bt.IsZero() {
		return time.Time{}
	}
	return bt.Add(time.Duration(ticks) * time.Second / userHZ)
}
