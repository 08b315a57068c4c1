package fileid

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// devOf is st_dev as an ID's Dev. Linux st_dev is the kernel's dev_t as
// userspace sees it, the number /proc/<pid>/fdinfo and /proc/<pid>/maps
// decode to.
func devOf(st *syscall.Stat_t) uint64 { return st.Dev }

// FromStat is the identity in a raw stat result (fstatat, fstat on an fd).
func FromStat(st *unix.Stat_t) ID { return ID{Dev: st.Dev, Ino: st.Ino} }
