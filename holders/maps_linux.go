package holders

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// readMaps adds the mappings of watched files. SQLite maps -shm (and the
// main file with mmap_size), and a process may close the fd and keep the
// mapping. Mappings are matched by inode first; reading
// /proc/<pid>/maps as text costs the kernel a d_path per mapping, a third
// of a full scan, so the PROCMAP_QUERY ioctl (Linux 6.11) is used where it
// exists: it returns device and inode without the path, and a path is
// asked for only for inodes the index has and, in our own mount
// namespace, for the few the name rule may need.
func (s *procScanner) readMaps(pd int, own bool) error {
	s.maps = s.maps[:0]
	if procmapQuery.Load() >= 0 {
		err := s.readMapsQuery(pd, own)
		if err == nil || !unsupportedIoctl(err) {
			return err
		}
		procmapQuery.Store(-1)
		s.maps = s.maps[:0]
	}
	return s.readMapsText(pd, own)
}

// mapSeen is an inode already looked at in this process's maps: obs is
// the index of its observation, -1 when it matches nothing.
type mapSeen struct {
	ino uint64
	obs int
}

// seenMap returns the earlier look at ino in this process, if any.
func (s *procScanner) seenMap(ino uint64) (mapSeen, bool) {
	for _, m := range s.maps {
		if m.ino == ino {
			return m, true
		}
	}
	return mapSeen{}, false
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

const (
	procmapVMAWrite  = 0x02
	procmapVMAShared = 0x08
)

func (s *procScanner) readMapsQuery(pd int, own bool) error {
	fd, err := unix.Openat(pd, "maps", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
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
		write := q.VMAFlags&(procmapVMAWrite|procmapVMAShared) == procmapVMAWrite|procmapVMAShared
		if m, ok := s.seenMap(q.Inode); ok {
			if m.obs >= 0 && write {
				s.obs[m.obs].mapWrite = true
			}
			continue
		}
		id := fileid.ID{Dev: s.w.statDev(unix.Mkdev(q.DevMajor, q.DevMinor)), Ino: q.Inode}
		indexed := s.w.indexed(id)
		if !indexed && !own {
			s.maps = append(s.maps, mapSeen{ino: q.Inode, obs: -1})
			continue
		}
		// An inode's path is the same in every process of one mount
		// namespace, so whether an unindexed one is a candidate is
		// decided once per scan. Paths in the watched directories are
		// never cached: an orphan's is checked in every process.
		if isCand, known := s.names[id]; !indexed && known && !isCand {
			s.maps = append(s.maps, mapSeen{ino: q.Inode, obs: -1})
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
		var path []byte
		if p.VMANameSize > 0 {
			path = trimDeleted(name[:p.VMANameSize-1]) // size counts the NUL
		}
		if !indexed && !(s.w.candidate(path) && s.w.roleBase(path)) {
			s.names[id] = false
			s.maps = append(s.maps, mapSeen{ino: q.Inode, obs: -1})
			continue
		}
		s.addMapping(pd, path, fmt.Appendf(s.buf[:0], "%x-%x", p.VMAStart, p.VMAEnd), id, own, write)
	}
}

func (s *procScanner) readMapsText(pd int, own bool) error {
	b, err := readAt(pd, "maps", s.buf)
	if err != nil {
		return err
	}
	s.buf = b[:0]
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
		if m, ok := s.seenMap(e.Ino); ok {
			if m.obs >= 0 && e.SharedWrite() {
				s.obs[m.obs].mapWrite = true
			}
			continue
		}
		id := fileid.ID{Dev: s.w.statDev(unix.Mkdev(e.Major, e.Minor)), Ino: e.Ino}
		path := trimDeleted(e.Path)
		if indexed := s.w.indexed(id); !indexed && !(own && s.w.candidate(path) && s.w.roleBase(path)) {
			s.maps = append(s.maps, mapSeen{ino: e.Ino, obs: -1})
			continue
		}
		s.addMapping(pd, path, e.Range, id, own, e.SharedWrite())
	}
	return nil
}

// addMapping records a mapping of a watched file. map_files gives the
// identity exactly as stat does, and the link count; it needs
// CAP_SYS_ADMIN, so without it the device and inode of the maps line
// stand.
func (s *procScanner) addMapping(pd int, path, vmaRange []byte, id fileid.ID, own, write bool) {
	o := observation{path: string(path), fd: -1, mapped: true, id: id, own: own, mapWrite: write, mapRange: string(vmaRange)}
	var st unix.Stat_t
	if unix.Fstatat(pd, "map_files/"+string(vmaRange), &st, 0) == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			s.maps = append(s.maps, mapSeen{ino: id.Ino, obs: -1})
			return
		}
		o.id, o.nlink, o.nlinkKnown = fileid.FromStat(&st), uint64(st.Nlink), true
		o.owner, o.ownerKnown = int(st.Uid), true
	}
	s.maps = append(s.maps, mapSeen{ino: id.Ino, obs: len(s.obs)})
	s.obs = append(s.obs, o)
}
