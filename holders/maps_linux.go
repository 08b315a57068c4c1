package holders

import (
	"bytes"
	"fmt"
	"slices"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// readMaps adds the mappings of watched files. SQLite maps -shm (and the
// main file with mmap_size), and a process may close the fd and keep the
// mapping. Reading /proc/<pid>/maps as text costs the kernel a d_path per
// mapping, a third of a full scan; the PROCMAP_QUERY ioctl (Linux 6.11)
// returns device and inode without the path, so paths are asked for only
// for inodes not yet classified in this scan.
func (s *procScanner) readMaps(pd int) error {
	if procmapQuery.Load() >= 0 {
		err := s.readMapsQuery(pd)
		if err == nil || !unsupportedIoctl(err) {
			return err
		}
		procmapQuery.Store(-1)
	}
	return s.readMapsText(pd)
}

// procmapQuery is -1 once the kernel has said it has no PROCMAP_QUERY.
var procmapQuery atomic.Int32

func unsupportedIoctl(err error) bool {
	return err == unix.ENOTTY || err == unix.EINVAL || err == unix.ENOSYS || err == unix.EOPNOTSUPP
}

// procmapQueryArg is struct procmap_query of include/uapi/linux/fs.h.
type procmapQueryArg struct {
	Size, QueryFlags, QueryAddr, VMAStart, VMAEnd, VMAFlags, VMAPageSize, VMAOffset, Inode uint64
	DevMajor, DevMinor, VMANameSize, BuildIDSize                                           uint32
	VMANameAddr, BuildIDAddr                                                               uint64
}

const (
	procmapQueryCoveringOrNext = 0x10
	procmapQueryFileBacked     = 0x20
	// PROCMAP_QUERY = _IOWR('f', 17, struct procmap_query)
	procmapQueryIoctl = 3<<30 | uint(unsafe.Sizeof(procmapQueryArg{}))<<16 | 'f'<<8 | 17
)

func (s *procScanner) queryVMA(fd int, q *procmapQueryArg) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(procmapQueryIoctl), uintptr(unsafe.Pointer(q)))
	if e != 0 {
		return e
	}
	return nil
}

func (s *procScanner) readMapsQuery(pd int) error {
	fd, err := unix.Openat(pd, "maps", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	s.seen = s.seen[:0]
	for addr := uint64(0); ; {
		q := procmapQueryArg{Size: uint64(unsafe.Sizeof(procmapQueryArg{})),
			QueryFlags: procmapQueryCoveringOrNext | procmapQueryFileBacked, QueryAddr: addr}
		if err := s.queryVMA(fd, &q); err != nil {
			if err == unix.ENOENT {
				return nil // no mapping at or after addr
			}
			return err
		}
		addr = q.VMAEnd
		if slices.Contains(s.seen, q.Inode) {
			continue
		}
		s.seen = append(s.seen, q.Inode)
		id := FileID{Dev: unix.Mkdev(q.DevMajor, q.DevMinor), Ino: q.Inode}
		isCand, known := s.names[id]
		if known && !isCand {
			continue
		}
		// Ask again for this mapping, with its path.
		name := s.link[:cap(s.link)]
		p := procmapQueryArg{Size: q.Size, QueryFlags: procmapQueryFileBacked, QueryAddr: q.VMAStart,
			VMANameSize: uint32(len(name)), VMANameAddr: uint64(uintptr(unsafe.Pointer(&name[0])))}
		if err := s.queryVMA(fd, &p); err != nil {
			if err == unix.ENOENT {
				continue // unmapped meanwhile
			}
			return err
		}
		if p.VMANameSize == 0 {
			continue
		}
		path := trimDeleted(name[:p.VMANameSize-1]) // size counts the NUL
		// An inode's path is the same in every process of one mount
		// namespace, so what it is decided once per scan. Paths of the
		// watched directories are never cached: an orphan's is checked
		// in every process.
		cand := s.w.candidate(path)
		if !cand {
			s.names[id] = false
			continue
		}
		s.addMapping(pd, path, fmt.Appendf(s.buf[:0], "%x-%x", p.VMAStart, p.VMAEnd), id)
	}
}

func (s *procScanner) readMapsText(pd int) error {
	b, err := readAt(pd, "maps", s.buf)
	if err != nil {
		return err
	}
	s.buf = b[:0]
	s.seen = s.seen[:0]
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		e, ok := parseMapsLine(line)
		if !ok {
			continue
		}
		path := trimDeleted(e.Path)
		if !s.w.candidate(path) || slices.Contains(s.seen, e.Ino) {
			continue
		}
		s.seen = append(s.seen, e.Ino)
		s.addMapping(pd, path, e.Range, FileID{Dev: unix.Mkdev(e.Major, e.Minor), Ino: e.Ino})
	}
	return nil
}

// addMapping records a mapping of a watched file. map_files gives the
// identity exactly as stat does (maps shows the superblock's device, which
// differs on btrfs subvolumes); it needs CAP_SYS_ADMIN, so fall back to
// the device and inode of the maps line.
func (s *procScanner) addMapping(pd int, path, vmaRange []byte, id FileID) {
	o := observation{path: string(path), fd: -1, mapped: true, id: id}
	var st unix.Stat_t
	if unix.Fstatat(pd, "map_files/"+string(vmaRange), &st, 0) == nil {
		o.id, o.nlink, o.nlinkKnown = FileID{Dev: st.Dev, Ino: st.Ino}, uint64(st.Nlink), true
	}
	s.obs = append(s.obs, o)
}
