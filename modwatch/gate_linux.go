//go:build linux

package modwatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// The gate is a second fanotify group, of permission class, with
// FAN_OPEN_PERM on every watched inode: an open(2) of a watched main
// waits until the gate answers. It always answers FAN_ALLOW (it never
// denies an operator's open); before it does, an open for writing the
// way no SQLite connection opens (write-only, or truncating: cp, dd,
// rsync --inplace, cat >) is reported as OpenWrite and the callback
// freezes the store's live writers, so no checkpoint of theirs can land
// between the tool's first write and the freeze (the rewrite.raced
// window of the FAN_MODIFY path). The wait is bounded by GateTimeout.
//
// Permission events carry an fd the kernel opens in the reading process.
// A close(2) of any fd of a file drops every POSIX lock the closing
// process's file table owns on it, and the agent's own SQLite connections
// hold such locks on mains: so the gate reads its events on a thread of
// its own with a private file table (unshare(CLONE_FILES)), where the
// event fds are installed and closed without touching the agent's locks.
type gate struct {
	fd   int    // the permission group (in both file tables)
	wake [2]int // a pipe to the gate thread: event fds to close, stopGate
	w    *Watcher
	log  *slog.Logger
	self int
	// holds are the opens being held, each answered by its goroutine.
	holds sync.WaitGroup
	done  chan struct{}
}

const gateMask = unix.FAN_OPEN_PERM

// flagsWait bounds how long the gate waits for an opener to be asleep in
// its open(2) before reading its flags (openFlags).
const flagsWait = 20 * time.Millisecond

func newGate(w *Watcher, log *slog.Logger) (*gate, error) {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK|unix.FAN_REPORT_TID,
		unix.O_RDONLY|unix.O_CLOEXEC|unix.O_LARGEFILE|unix.O_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("fanotify_init (permission events): %w", err)
	}
	g := &gate{fd: fd, w: w, log: log, self: os.Getpid(), done: make(chan struct{})}
	if err := unix.Pipe2(g.wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("gate pipe: %w", err)
	}
	ready := make(chan error, 1)
	go g.start(ready)
	if err := <-ready; err != nil {
		unix.Close(fd)
		unix.Close(g.wake[0])
		unix.Close(g.wake[1])
		return nil, err
	}
	return g, nil
}

func (g *gate) mark(path string, add bool) error {
	op := uint(unix.FAN_MARK_ADD)
	if !add {
		op = unix.FAN_MARK_REMOVE
	}
	return unix.FanotifyMark(g.fd, op|unix.FAN_MARK_DONT_FOLLOW, gateMask, unix.AT_FDCWD, path)
}

// close stops the gate thread. The kernel allows every open still
// waiting once the group's last fd is closed.
func (g *gate) close() {
	g.holds.Wait() // each within GateTimeout; answering on a closed fd number could hit another file
	g.post(stopGate)
	<-g.done
	unix.Close(g.wake[1])
	unix.Close(g.fd)
}

// start locks the gate goroutine to an OS thread other than the
// process's main one: /proc/<pid>/fd (what every holder scan, lsof and
// the agent's own checks read) is the main thread's file table, which
// must stay the agent's.
func (g *gate) start(ready chan<- error) {
	runtime.LockOSThread()
	if unix.Gettid() != unix.Getpid() {
		g.run(ready)
		return
	}
	locked := make(chan struct{})
	go func() {
		runtime.LockOSThread() // not on the main thread: this goroutine holds it
		close(locked)
		g.run(ready)
	}()
	<-locked
	runtime.UnlockOSThread()
}

// run is the gate thread, locked by start. It is never unlocked: the
// thread, with its private file table, ends with the goroutine. It uses
// raw system calls only (no os.File: Go's poller is not in its table).
func (g *gate) run(ready chan<- error) {
	if err := unix.Unshare(unix.CLONE_FILES); err != nil {
		ready <- fmt.Errorf("gate thread: unshare(CLONE_FILES): %w", err)
		return
	}
	defer close(g.done)
	// The private table starts as a copy of the agent's: drop the copies
	// (closing them here releases no lock of the agent's table), so no
	// file the agent closes is kept open by this one.
	if err := closeAllBut(g.fd, g.wake[0]); err != nil {
		ready <- fmt.Errorf("gate thread: %w", err)
		return
	}
	ready <- nil
	defer unix.Close(g.wake[0])
	buf := make([]byte, 16<<10)
	for {
		fds := []unix.PollFd{{Fd: int32(g.fd), Events: unix.POLLIN}, {Fd: int32(g.wake[0]), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			g.log.Error("permission events stopped: opens of watched mains are no longer held", "err", err)
			return
		}
		if fds[1].Revents != 0 && g.drain() {
			return
		}
		if fds[0].Revents == 0 {
			continue
		}
		n, err := unix.Read(g.fd, buf)
		if err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			g.log.Error("permission events stopped: opens of watched mains are no longer held", "err", err)
			return
		}
		g.handle(buf[:n])
	}
}

// closeAllBut closes every fd of the calling thread's table but keep and
// the runtime's poller fds.
func closeAllBut(keep ...int) error {
	dfd, err := unix.Open("/proc/thread-self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("list own fds: %w", err)
	}
	var fds []int
	buf, link := make([]byte, 8<<10), make([]byte, 256)
	for {
		n, err := unix.ReadDirent(dfd, buf)
		if err != nil {
			unix.Close(dfd)
			return fmt.Errorf("list own fds: %w", err)
		}
		if n == 0 {
			break
		}
		_, _, names := unix.ParseDirent(buf[:n], -1, nil)
		for _, name := range names {
			fd, err := strconv.Atoi(name)
			if err != nil || fd == dfd {
				continue
			}
			// Go's runtime wakes its poller through an eventfd from any
			// thread, this one included: its epoll and eventfd stay (a
			// copy holds no lock and no file open). Every other copy goes,
			// another Watcher's fanotify groups first: a permission group
			// kept alive here after its Close would leave opens of its
			// marked files waiting for an answer nobody gives.
			n, err := unix.Readlinkat(dfd, name, link)
			if err == nil && (string(link[:n]) == "anon_inode:[eventpoll]" || string(link[:n]) == "anon_inode:[eventfd]") {
				continue
			}
			fds = append(fds, fd)
		}
	}
	unix.Close(dfd)
	for _, fd := range fds {
		if !contains(keep, fd) {
			unix.Close(fd)
		}
	}
	return nil
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (g *gate) handle(b []byte) {
	ne := binary.NativeEndian
	for len(b) >= metaLen {
		evLen := int(ne.Uint32(b[0:]))
		if evLen < metaLen || evLen > len(b) || b[4] != unix.FANOTIFY_METADATA_VERSION {
			return // unreadable: its fd, if any, is allowed when the group closes
		}
		mask := ne.Uint64(b[8:])
		evfd := int(int32(ne.Uint32(b[16:])))
		tid := int(int32(ne.Uint32(b[20:])))
		b = b[evLen:]
		if evfd < 0 {
			continue
		}
		if mask&unix.FAN_OPEN_PERM == 0 {
			unix.Close(evfd)
			continue
		}
		if ev, ok := g.toHold(evfd, tid); ok {
			// Answered from another goroutine, so opens of other files
			// and the agent's own are not queued behind this one; the
			// fd is closed here, where it lives.
			g.holds.Add(1)
			go g.hold(ev, evfd)
			continue
		}
		g.allow(evfd)
		unix.Close(evfd)
	}
}

// allow answers the permission event of evfd. The group's fd is in both
// file tables and the kernel finds the event by the number, so any
// thread may answer.
func (g *gate) allow(evfd int) {
	resp := make([]byte, 8)
	binary.NativeEndian.PutUint32(resp[0:], uint32(int32(evfd)))
	binary.NativeEndian.PutUint32(resp[4:], unix.FAN_ALLOW)
	if _, err := unix.Write(g.fd, resp); err != nil {
		g.log.Error("permission response failed", "err", err)
	}
}

// toHold says whether an open is one to hold: of a watched inode, by
// another process, write-only or truncating.
func (g *gate) toHold(evfd, tid int) (Event, bool) {
	var st unix.Stat_t
	if err := unix.Fstat(evfd, &st); err != nil {
		return Event{}, false
	}
	id := fileid.FromStat(&st)
	g.w.mu.Lock()
	_, watched := g.w.paths[id]
	g.w.mu.Unlock()
	if !watched {
		return Event{}, false
	}
	pid := tgidOf(tid)
	if pid <= 0 || pid == g.self {
		return Event{}, false
	}
	flags, ok := openFlags(tid)
	if !ok || !rewritingOpen(flags) {
		return Event{}, false // a SQLite connection, a reader, or not told: FAN_MODIFY has it
	}
	return Event{Op: OpenWrite, ID: id, Pid: pid, At: time.Now()}, true
}

// hold runs the callback for ev, allows the open when it returns or after
// GateTimeout, and hands evfd back to the gate thread to close.
func (g *gate) hold(ev Event, evfd int) {
	defer g.holds.Done()
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.w.fn(ev)
	}()
	t := time.NewTimer(GateTimeout)
	select {
	case <-done:
	case <-t.C:
		g.log.Warn("an open for writing of a live main was allowed before its writers were frozen",
			"event", EventGateTimeout, "pid", ev.Pid, "id", ev.ID, "waited_ms", GateTimeout.Milliseconds())
	}
	t.Stop()
	g.allow(evfd)
	g.post(evfd)
}

// post queues a request to the gate thread: an event fd to close, or
// stopGate. Pipe writes this small are atomic.
func (g *gate) post(v int) {
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, uint32(int32(v)))
	_, _ = unix.Write(g.wake[1], b)
}

const stopGate = -1

// drain closes the event fds posted and reports whether stop was posted.
func (g *gate) drain() bool {
	b := make([]byte, 4*64)
	n, err := unix.Read(g.wake[0], b)
	if err != nil || n < 4 {
		return err != nil && !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN)
	}
	stop := false
	for i := 0; i+4 <= n; i += 4 {
		v := int(int32(binary.NativeEndian.Uint32(b[i:])))
		if v == stopGate {
			stop = true
			continue
		}
		unix.Close(v)
	}
	return stop
}

// rewritingOpen reports whether open(2) flags are a tool's rewrite:
// write-only or truncating. SQLite opens a main read-write or read-only,
// never truncating, so a new connection is never held.
func rewritingOpen(flags int) bool {
	acc := flags & unix.O_ACCMODE
	return acc == unix.O_WRONLY || (acc == unix.O_RDWR && flags&unix.O_TRUNC != 0)
}

// tgidOf is the thread group (the process) of thread tid.
func tgidOf(tid int) int {
	b, ok := readSmall("/proc/" + strconv.Itoa(tid) + "/status")
	if !ok {
		return 0
	}
	_, rest, found := bytes.Cut(b, []byte("\nTgid:"))
	if !found {
		return 0
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	pid, err := strconv.Atoi(strings.TrimSpace(string(line)))
	if err != nil {
		return 0
	}
	return pid
}

// openFlags reads the flags of the open(2) thread tid is blocked in from
// /proc/<tid>/syscall. Only the open calls whose flags are a plain
// argument are read (openat2 passes them in memory): the others say
// not told.
//
// The kernel reads a thread's system call only while the thread is off
// its CPU, and says "running" otherwise. The opener queues the permission
// event before it goes to sleep waiting for the answer, so on a loaded
// machine the gate can read that file first: the open was then let
// through unheld as "not told" (cp over a checkpointing writer, raced and
// malformed). It cannot return without the answer, so "running" is read
// again until it is asleep, for flagsWait at most.
func openFlags(tid int) (int, bool) {
	path := "/proc/" + strconv.Itoa(tid) + "/syscall"
	b, ok := readSmall(path)
	for deadline := time.Now().Add(flagsWait); ok && bytes.HasPrefix(b, []byte("running")) && time.Now().Before(deadline); {
		_ = unix.Nanosleep(&unix.Timespec{Nsec: 50_000}, nil)
		b, ok = readSmall(path)
	}
	if !ok {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0, false
	}
	nr, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, false
	}
	arg, ok := openFlagsArg(nr)
	if !ok {
		return 0, false
	}
	if arg < 0 {
		return unix.O_WRONLY | unix.O_CREAT | unix.O_TRUNC, true // creat(2)
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(f[1+arg], "0x"), 16, 64)
	if err != nil {
		return 0, false
	}
	return int(v), true
}

// readSmall reads a small /proc file with raw system calls (the gate
// thread has no poller).
func readSmall(path string) ([]byte, bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	buf := make([]byte, 4096)
	n, err := unix.Read(fd, buf)
	if err != nil || n <= 0 {
		return nil, false
	}
	return buf[:n], true
}
