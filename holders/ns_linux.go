package holders

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// Mount namespaces. A process in another mount namespace (a container
// with the profile home as a volume) sees the store under other paths:
// its fd link texts are its own view, so the path filter cannot find it
// and the scan matches its files by inode instead. The host's view of a
// path is worked out from the two mount tables, for display.

// selfMountNS is the inode of the scan's own mount namespace.
var selfMountNS = sync.OnceValues(func() (uint64, error) {
	fd, err := unix.Open("/proc/self", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	return mountNS(fd)
})

// mountNS is the inode of the mount namespace of the process whose
// /proc/<pid> directory is pd, from the link text "mnt:[4026531841]":
// half the cost of a stat through the link, once per process and scan.
// Reading it needs the same access as its fds.
func mountNS(pd int) (uint64, error) {
	var b [32]byte
	n, err := unix.Readlinkat(pd, "ns/mnt", b[:])
	if err != nil {
		return 0, err
	}
	v, ok := bytes.CutPrefix(b[:n], []byte("mnt:["))
	if !ok || len(v) < 2 || v[len(v)-1] != ']' {
		return 0, fmt.Errorf("ns/mnt links to %q", b[:n])
	}
	return strconv.ParseUint(string(v[:len(v)-1]), 10, 64)
}

// kernelDevs remembers, per stat(2) device, the superblock device the
// kernel prints in /proc/<pid>/maps and /proc/locks. They differ only
// for filesystems with anonymous devices per subvolume (btrfs), which all
// have major 0.
var kernelDevs sync.Map // uint64 → uint64

// addKernelDev records how the kernel prints the device of the store's
// directory, when that is not stat's.
func (w *watch) addKernelDev(dir string, st fileid.State) {
	if !st.Exists || unix.Major(st.ID.Dev) != 0 {
		return
	}
	kd, ok := kernelDevs.Load(st.ID.Dev)
	if !ok {
		kd = superblockDev(dir, st.ID.Dev)
		kernelDevs.Store(st.ID.Dev, kd)
	}
	if d := kd.(uint64); d != st.ID.Dev {
		if w.kdev == nil {
			w.kdev = map[uint64]uint64{}
		}
		w.kdev[d] = st.ID.Dev
	}
}

// superblockDev finds dir's mount in our mount table (by statx's mount
// id) and returns the device that table prints for it; dev when it cannot
// tell.
func superblockDev(dir string, dev uint64) uint64 {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, 0, unix.STATX_MNT_ID, &stx); err != nil || stx.Mask&unix.STATX_MNT_ID == 0 {
		return dev
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return dev
	}
	for _, m := range parseMountinfo(b) {
		if uint64(m.ID) == stx.Mnt_id {
			return m.Dev
		}
	}
	return dev
}

// mountsOf reads the mount table of the process whose /proc directory is
// pd, once per process and scan.
func (s *procScanner) mountsOf(pd int, cache *[]mountEntry, read *bool) []mountEntry {
	if !*read {
		*read = true
		if b, err := readAt(pd, "mountinfo", nil); err == nil {
			*cache = parseMountinfo(b)
		}
	}
	return *cache
}

// hostPath is where the scan sees the file that a process of another
// mount namespace opened as holder, through its mount mntID.
func (s *procScanner) hostPath(holder string, mntID int, theirs []mountEntry) string {
	i := slices.IndexFunc(theirs, func(m mountEntry) bool { return m.ID == mntID })
	if i < 0 {
		return ""
	}
	return hostPathOf(holder, theirs[i], s.e.hostMounts(), func(p string) bool {
		_, ok := s.w.byDir[filepath.Dir(p)]
		return ok
	})
}
