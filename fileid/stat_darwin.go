package fileid

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// devOf is st_dev as an ID's Dev. dev_t is an int32 on macOS; libproc's
// vinfo_stat.vst_dev carries the same bits unsigned, so Dev is those bits.
func devOf(st *syscall.Stat_t) uint64 { return uint64(uint32(st.Dev)) }

// FromStat is the identity in a raw stat result (fstatat, fstat on an fd).
func FromStat(st *unix.Stat_t) ID { return ID{Dev: uint64(uint32(st.Dev)), Ino: st.Ino} }
