//go:build linux

package modwatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// Watcher is one fanotify group. Events are reported with file handles
// (FAN_REPORT_FID), never with an fd: an fd the agent opened and closed
// on a store's main would be a close() of that inode in the agent's
// process, which must never happen behind a SQLite connection's locks.
type Watcher struct {
	f    *os.File // the group's fd, nonblocking, in Go's poller; nil with ino
	fn   func(Event)
	gate *gate // nil: opens are not held (no permission events here)
	log  *slog.Logger
	ino  *inotifyBackend // not nil: no writer pids (inotify_linux.go)

	mu    sync.Mutex
	byKey map[string]fileid.ID // file handle (fsid, type, bytes) → inode
	paths map[fileid.ID]string // the path each inode was marked by

	done   chan struct{}
	closed atomic.Bool
}

// watchMask is every event the agent needs: a write (or truncate) and the
// close of a descriptor that was open for writing.
const watchMask = unix.FAN_MODIFY | unix.FAN_CLOSE_WRITE

// New starts a fanotify group and calls fn for each event, on the
// group's one reading goroutine: fn must be quick (the freeze path runs
// in it) and must not call back into the Watcher's Close. When the kernel
// has permission events it also starts the gate (gate_linux.go), which
// calls fn with OpenWrite events from its own goroutine, concurrently;
// without them it says so on log and runs without.
func New(fn func(Event), cfg Config) (*Watcher, error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("subsystem", "modwatch")
	if !hasSysAdmin() {
		return newInotify(fn, log)
	}
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK|unix.FAN_REPORT_FID,
		unix.O_RDONLY|unix.O_CLOEXEC|unix.O_LARGEFILE)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("%w: fanotify_init: %v", ErrUnsupported, err)
		}
		return nil, fmt.Errorf("fanotify_init: %w", err)
	}
	w := &Watcher{f: os.NewFile(uintptr(fd), "fanotify"), fn: fn, log: log,
		byKey: map[string]fileid.ID{}, paths: map[fileid.ID]string{}, done: make(chan struct{})}
	if cfg.NoGate {
		log.Debug("opens for writing of a live main are not held (configured)")
	} else if g, err := newGate(w, log); err != nil {
		log.Info("opens for writing of a live main are not held (rewrites are caught at their first write)", "err", err,
			"hint", "permission events need CONFIG_FANOTIFY_ACCESS_PERMISSIONS")
	} else {
		w.gate = g
	}
	go w.loop()
	return w, nil
}

// Attributed reports whether events name the writer (fanotify as root);
// without, every Pid is 0.
func (w *Watcher) Attributed() bool { return w.ino == nil }

// Gated reports whether opens for writing of watched files are held
// until the callback has run (permission events).
func (w *Watcher) Gated() bool { return w.gate != nil }

// Watch marks the inode at path (never following a symlink) and returns
// its identity. Marking an inode already watched is a no-op.
func (w *Watcher) Watch(path string) (fileid.ID, error) {
	if w.ino != nil {
		return w.inotifyWatch(path)
	}
	key, id, err := handleOf(path)
	if err != nil {
		return id, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.byKey[key]; ok {
		return id, nil
	}
	if err := unix.FanotifyMark(int(w.f.Fd()), unix.FAN_MARK_ADD|unix.FAN_MARK_DONT_FOLLOW, watchMask, unix.AT_FDCWD, path); err != nil {
		return id, fmt.Errorf("watch writes to %s: fanotify_mark: %w", path, err)
	}
	if w.gate != nil {
		if err := w.gate.mark(path, true); err != nil {
			_ = unix.FanotifyMark(int(w.f.Fd()), unix.FAN_MARK_REMOVE|unix.FAN_MARK_DONT_FOLLOW, watchMask, unix.AT_FDCWD, path)
			return id, fmt.Errorf("hold opens of %s: fanotify_mark: %w", path, err)
		}
	}
	// The name may have moved to another inode between the handle and the
	// mark: then the mark is on that one, and the next Watch fixes it up.
	key2, id2, err := handleOf(path)
	if err != nil || key2 != key {
		return id2, fmt.Errorf("watch writes to %s: the file changed while it was being marked", path)
	}
	w.byKey[key], w.paths[id] = id, path
	return id, nil
}

// Unwatch stops reporting events of id. Its mark is removed when the
// inode is still at the path it was marked by; otherwise the kernel drops
// it with the inode, and its events are ignored until then.
func (w *Watcher) Unwatch(id fileid.ID) {
	if w.ino != nil {
		w.inotifyUnwatch(id)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	path, ok := w.paths[id]
	if !ok {
		return
	}
	delete(w.paths, id)
	for k, v := range w.byKey {
		if v == id {
			delete(w.byKey, k)
		}
	}
	if _, now, err := handleOf(path); err == nil && now == id {
		_ = unix.FanotifyMark(int(w.f.Fd()), unix.FAN_MARK_REMOVE|unix.FAN_MARK_DONT_FOLLOW, watchMask, unix.AT_FDCWD, path)
		if w.gate != nil {
			_ = w.gate.mark(path, false)
		}
	}
}

// Close stops the group and waits for its goroutine; a second Close
// does nothing.
func (w *Watcher) Close() error {
	if !w.closed.CompareAndSwap(false, true) {
		return nil
	}
	if w.gate != nil {
		w.gate.close()
	}
	f := w.f
	if w.ino != nil {
		f = w.ino.f
	}
	err := f.Close()
	<-w.done
	return err
}

// handleOf is the key fanotify reports path's inode by: the filesystem's
// fsid and the file handle, as name_to_handle_at gives it.
func handleOf(path string) (string, fileid.ID, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return "", fileid.ID{}, fmt.Errorf("watch writes to %s: %w", path, err)
	}
	id := fileid.FromStat(&st)
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", id, fmt.Errorf("watch writes to %s: not a regular file (symlinks are not followed)", path)
	}
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, path, 0)
	if err != nil {
		return "", id, fmt.Errorf("watch writes to %s: name_to_handle_at: %w", path, err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return "", id, fmt.Errorf("watch writes to %s: statfs: %w", path, err)
	}
	return handleKey(fs.Fsid.Val, h.Type(), h.Bytes()), id, nil
}

func handleKey(fsid [2]int32, typ int32, b []byte) string {
	k := make([]byte, 12, 12+len(b))
	binary.NativeEndian.PutUint32(k[0:], uint32(fsid[0]))
	binary.NativeEndian.PutUint32(k[4:], uint32(fsid[1]))
	binary.NativeEndian.PutUint32(k[8:], uint32(typ))
	return string(append(k, b...))
}

func (w *Watcher) loop() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			// Nothing else is expected from a fanotify read; stop rather
			// than spin, and say so as a lost-events overflow.
			w.fn(Event{Op: Overflow, At: time.Now()})
			return
		}
		w.parse(buf[:n], time.Now())
	}
}

// Offsets in struct fanotify_event_metadata and the info records after it.
const (
	metaLen     = 24
	infoHdrLen  = 4
	fidInfoHead = infoHdrLen + 8 + 8 // header, fsid, file_handle's bytes and type
)

func (w *Watcher) parse(b []byte, at time.Time) {
	ne := binary.NativeEndian
	for len(b) >= metaLen {
		evLen := int(ne.Uint32(b[0:]))
		if evLen < metaLen || evLen > len(b) || b[4] != unix.FANOTIFY_METADATA_VERSION {
			w.fn(Event{Op: Overflow, At: at}) // a record this code cannot read: treat it as lost events
			return
		}
		mask := ne.Uint64(b[8:])
		pid := int(int32(ne.Uint32(b[20:])))
		ev, rest := b[:evLen], b[evLen:]
		b = rest
		if mask&unix.FAN_Q_OVERFLOW != 0 {
			w.fn(Event{Op: Overflow, At: at})
			continue
		}
		id, ok := w.lookup(ev[int(ne.Uint16(ev[6:])):])
		if !ok {
			continue
		}
		if mask&unix.FAN_MODIFY != 0 {
			w.fn(Event{Op: Write, ID: id, Pid: pid, At: at})
		}
		if mask&unix.FAN_CLOSE_WRITE != 0 {
			w.fn(Event{Op: CloseWrite, ID: id, Pid: pid, At: at})
		}
	}
}

// lookup finds the watched inode an event's FID record names.
func (w *Watcher) lookup(info []byte) (fileid.ID, bool) {
	ne := binary.NativeEndian
	for len(info) >= infoHdrLen {
		typ, n := info[0], int(ne.Uint16(info[2:]))
		if n < infoHdrLen || n > len(info) {
			return fileid.ID{}, false
		}
		rec := info[:n]
		info = info[n:]
		if typ != unix.FAN_EVENT_INFO_TYPE_FID || len(rec) < fidInfoHead {
			continue
		}
		fsid := [2]int32{int32(ne.Uint32(rec[4:])), int32(ne.Uint32(rec[8:]))}
		hb, ht := int(ne.Uint32(rec[12:])), int32(ne.Uint32(rec[16:]))
		if fidInfoHead+hb > len(rec) {
			return fileid.ID{}, false
		}
		key := handleKey(fsid, ht, rec[fidInfoHead:fidInfoHead+hb])
		w.mu.Lock()
		id, ok := w.byKey[key]
		w.mu.Unlock()
		return id, ok
	}
	return fileid.ID{}, false
}
