package holders

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func fileState(fi fs.FileInfo) FileState {
	st := FileState{Exists: true, Mode: fi.Mode(), UID: -1, GID: -1}
	if s, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ID = FileID{Dev: s.Dev, Ino: s.Ino}
		st.Nlink = uint64(s.Nlink)
		st.UID, st.GID = int(s.Uid), int(s.Gid)
	}
	return st
}

func scanAll(targets []Target, known map[int]Process) (*Result, error) {
	start := time.Now()
	proc, err := openProc()
	if err != nil {
		return nil, err
	}
	defer unix.Close(proc)
	w := newWatch(targets)
	pids, err := listPids(proc, make([]byte, 32<<10))
	if err != nil {
		return nil, err
	}
	c := inspectAll(w, proc, pids, known)
	if os.Geteuid() != 0 {
		if b, err := os.ReadFile("/proc/self/mountinfo"); err != nil || hidesProcesses(b) {
			c.addBlind(Blind{UID: -1, Reason: "/proc is mounted with hidepid=invisible: other users' processes are not listed; scan as root"}, nil)
		}
	}
	res := c.result()
	res.Took = time.Since(start)
	return res, nil
}

func scanPids(targets []Target, pids []int, known map[int]Process) (*Result, error) {
	start := time.Now()
	proc, err := openProc()
	if err != nil {
		return nil, err
	}
	defer unix.Close(proc)
	w := newWatch(targets)
	s := newProcScanner(w, proc, known)
	defer s.release()
	for _, pid := range pids {
		if pid != s.self {
			s.inspect(pid)
		}
	}
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

// inspectAll spreads the pids over one worker per CPU: the scan's cost is
// almost all system calls into procfs, which run in parallel.
func inspectAll(w *watch, proc int, pids []int, known map[int]Process) *collector {
	workers := min(runtime.GOMAXPROCS(0), 8, max(len(pids)/64, 1))
	scanners := make([]*procScanner, workers)
	var next atomic.Int64
	var wg sync.WaitGroup
	const chunk = 16
	for i := range scanners {
		s := newProcScanner(w, proc, known)
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
// getdents and a readlink per fd, and a stat only for the few links that
// point into a watched directory.
type procScanner struct {
	w     *watch
	c     *collector
	known map[int]Process
	proc  int
	self  int
	dents []byte
	link  []byte
	buf   []byte
	obs   []observation
	seen  []uint64
	names map[FileID]bool // per scan: is a mapped inode's path in a watched dir
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

func newProcScanner(w *watch, proc int, known map[int]Process) *procScanner {
	b := bufferPool.Get().(*scanBuffers)
	return &procScanner{
		w: w, c: newCollector(w), known: known, proc: proc, self: os.Getpid(),
		dents: b.dents, link: b.link, buf: b.buf, names: make(map[FileID]bool),
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

// inspect looks at one process. Everything is read relative to one open
// /proc/<pid> directory, which stays bound to the process it was opened
// for: if the pid is recycled meanwhile, reads fail instead of mixing two
// processes' facts.
func (s *procScanner) inspect(pid int) {
	name := strconv.Itoa(pid)
	pd, err := unix.Openat(s.proc, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if !gone(err) {
			s.c.addBlind(Blind{Pid: pid, UID: -1, Reason: fmt.Sprintf("open /proc/%d: %v", pid, err)}, nil)
		}
		return
	}
	defer unix.Close(pd)
	s.obs = s.obs[:0]
	if err := s.readFDs(pd); err != nil {
		if !gone(err) {
			s.blind(pd, pid, fmt.Sprintf("read /proc/%d/fd: %v", pid, err))
		}
		return
	}
	if err := s.readMaps(pd); err != nil {
		if !gone(err) {
			s.blind(pd, pid, fmt.Sprintf("read /proc/%d/maps: %v", pid, err))
		}
		return
	}
	hs := s.w.match(s.obs)
	if len(hs) == 0 {
		return
	}
	p, err := s.describe(pd, pid)
	if err != nil {
		return // exited: it holds nothing any more
	}
	s.c.add(p, hs)
}

func (s *procScanner) blind(pd, pid int, reason string) {
	uid := -1
	var st unix.Stat_t
	if unix.Fstat(pd, &st) == nil {
		// /proc/<pid> is owned by the process's effective uid (root when
		// it is not dumpable, which only widens what counts).
		uid = int(st.Uid)
	}
	// status stays readable when fd and maps are not. Read it now, while
	// pd still names this process: its groups decide whether group
	// permissions let it open a store.
	var groups []int
	known := false
	if uid != 0 {
		if b, err := readAt(pd, "status", nil); err == nil {
			if euid, g, err := parseStatusIDs(b); err == nil {
				uid, groups, known = euid, g, true
			}
		}
	}
	s.c.addBlind(Blind{Pid: pid, UID: uid, Reason: reason}, func() ([]int, bool) { return groups, known })
}

func (s *procScanner) readFDs(pd int) error {
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
		path := trimDeleted(s.link[:n])
		if !s.w.candidate(path) {
			return
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fdd, fdName, &st, 0); err != nil {
			if err != unix.ENOENT {
				linkErr = err
			}
			return
		}
		s.obs = append(s.obs, observation{
			path: string(path), fd: fd, id: FileID{Dev: st.Dev, Ino: st.Ino},
			nlink: uint64(st.Nlink), nlinkKnown: true,
		})
	})
	if err != nil {
		return err
	}
	return linkErr
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
	if k, ok := s.known[pid]; ok && k.StartTicks == st.StartTicks {
		p.UID, p.User, p.Exe, p.Cmdline = k.UID, k.User, k.Exe, k.Cmdline
		return p, nil
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

var bootTime = sync.OnceValue(func() time.Time {
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
