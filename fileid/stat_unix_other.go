//go:build unix && !linux && !darwin

package fileid

import "golang.org/x/sys/unix"

// FromStat is the identity in a raw stat result (fstatat, fstat on an fd).
func FromStat(st *unix.Stat_t) ID { return ID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)} }
