//go:build linux

package modwatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// Without CAP_SYS_ADMIN fanotify names no writer (an unprivileged group
// gets pid 0 for other processes' events) and has no permission events:
// the Watcher then uses inotify on each watched file, whose watch
// follows the inode too. Events carry Pid 0; the receiver judges a write
// by what it did to the file (supervisor: the main's header against the
// WAL) rather than by who made it.
type inotifyBackend struct {
	f *os.File // nonblocking, in Go's poller

	byWD map[int32]fileid.ID
	wds  map[fileid.ID]int32
}

const inotifyMask = unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_DONT_FOLLOW

// hasSysAdmin reports whether this process has CAP_SYS_ADMIN in its
// effective set, which fanotify needs to report writer pids.
func hasSysAdmin() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	_, rest, ok := bytes.Cut(b, []byte("\nCapEff:"))
	if !ok {
		return false
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	eff, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 64)
	return err == nil && eff&(1<<unix.CAP_SYS_ADMIN) != 0
}

func newInotify(fn func(Event), log *slog.Logger) (*Watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("%w: inotify_init1: %v", ErrUnsupported, err)
	}
	w := &Watcher{fn: fn, log: log, paths: map[fileid.ID]string{}, done: make(chan struct{}),
		ino: &inotifyBackend{f: os.NewFile(uintptr(fd), "inotify"), byWD: map[int32]fileid.ID{}, wds: map[fileid.ID]int32{}}}
	go w.inotifyLoop()
	return w, nil
}

func (w *Watcher) inotifyWatch(path string) (fileid.ID, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fileid.ID{}, fmt.Errorf("watch writes to %s: %w", path, err)
	}
	id := fileid.FromStat(&st)
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return id, fmt.Errorf("watch writes to %s: not a regular file (symlinks are not followed)", path)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.ino.wds[id]; ok {
		return id, nil
	}
	wd, err := unix.InotifyAddWatch(int(w.ino.f.Fd()), path, inotifyMask)
	if err != nil {
		return id, fmt.Errorf("watch writes to %s: inotify_add_watch: %w", path, err)
	}
	if err := unix.Lstat(path, &st); err != nil || fileid.FromStat(&st) != id {
		_, _ = unix.InotifyRmWatch(int(w.ino.f.Fd()), uint32(wd))
		return fileid.FromStat(&st), fmt.Errorf("watch writes to %s: the file changed while it was being marked", path)
	}
	w.ino.byWD[int32(wd)], w.ino.wds[id], w.paths[id] = id, int32(wd), path
	return id, nil
}

func (w *Watcher) inotifyUnwatch(id fileid.ID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wd, ok := w.ino.wds[id]
	if !ok {
		return
	}
	delete(w.ino.wds, id)
	delete(w.ino.byWD, wd)
	delete(w.paths, id)
	_, _ = unix.InotifyRmWatch(int(w.ino.f.Fd()), uint32(wd))
}

func (w *Watcher) inotifyLoop() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.ino.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			w.fn(Event{Op: Overflow, At: time.Now()})
			return
		}
		w.inotifyParse(buf[:n], time.Now())
	}
}

func (w *Watcher) inotifyParse(b []byte, at time.Time) {
	ne := binary.NativeEndian
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(ne.Uint32(b[0:]))
		mask := ne.Uint32(b[4:])
		n := unix.SizeofInotifyEvent + int(ne.Uint32(b[12:]))
		if n > len(b) {
			return
		}
		b = b[n:]
		if mask&unix.IN_Q_OVERFLOW != 0 {
			w.fn(Event{Op: Overflow, At: at})
			continue
		}
		w.mu.Lock()
		id, ok := w.ino.byWD[wd]
		if ok && mask&unix.IN_IGNORED != 0 { // the inode is gone: the kernel dropped the watch
			delete(w.ino.byWD, wd)
			delete(w.ino.wds, id)
			delete(w.paths, id)
		}
		w.mu.Unlock()
		if !ok {
			continue
		}
		if mask&unix.IN_MODIFY != 0 {
			w.fn(Event{Op: Write, ID: id, At: at})
		}
		if mask&unix.IN_CLOSE_WRITE != 0 {
			w.fn(Event{Op: CloseWrite, ID: id, At: at})
		}
	}
}
