package holders

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/stateguard/stateguard/fileid"
)

// Decoding of macOS libproc results. It lives in a file without build tags
// so it is tested on every OS, against byte fixtures built by hand from
// the struct layouts in xnu's bsd/sys/proc_info.h (testdata/libproc/).
// Both macOS architectures (amd64, arm64) are little-endian with the same
// layouts.

const (
	procAllPids             = 1 // proc_listpids type
	procPidListFDs          = 1 // proc_pidinfo flavor: struct proc_fdinfo[]
	procPidTBSDInfo         = 3 // proc_pidinfo flavor: struct proc_bsdinfo
	procPidFDVnodePathInfo  = 2 // proc_pidfdinfo flavor: struct vnode_fdinfowithpath
	proxFDTypeVnode         = 1 // proc_fdinfo.proc_fdtype of a file
	procFDInfoSize          = 8
	procBSDInfoSize         = 136
	vnodeFDInfoWithPathSize = 1200
	maxPathLen              = 1024
)

// Offsets in struct vnode_fdinfowithpath: struct proc_fileinfo (24 bytes)
// then struct vnode_info_path { struct vnode_info { struct vinfo_stat
// (136 bytes); int vi_type; int vi_pad; fsid_t vi_fsid; }; char
// vip_path[MAXPATHLEN]; }.
const (
	pfiOpenFlags = 0 // uint32 fi_openflags: FREAD, FWRITE, ...
	fWrite       = 0x2
	vstDev       = 24 + 0  // uint32
	vstMode      = 24 + 4  // uint16
	vstNlink     = 24 + 6  // uint16
	vstIno       = 24 + 8  // uint64
	vstUID       = 24 + 16 // uint32
	vstGID       = 24 + 20 // uint32
	vstSize      = 24 + 88 // int64
	vipPath      = 24 + 136 + 4 + 4 + 8
)

// Offsets in struct proc_bsdinfo.
const (
	pbiStatus     = 4
	pbiPid        = 12
	pbiUID        = 20 // effective
	pbiGID        = 24
	pbiRUID       = 28
	pbiComm       = 48 // char[MAXCOMLEN=16]
	pbiStartSec   = 120
	pbiStartUsec  = 128
	maxComLen     = 16
	pbiStatusZomb = 5 // SZOMB
)

// decodePids decodes proc_listpids output: an int32 array, where unused
// slots (the kernel's estimate is padded) are 0.
func decodePids(b []byte) []int {
	var pids []int
	for ; len(b) >= 4; b = b[4:] {
		if pid := int32(binary.LittleEndian.Uint32(b)); pid > 0 {
			pids = append(pids, int(pid))
		}
	}
	return pids
}

// procFD is one struct proc_fdinfo.
type procFD struct {
	FD   int
	Type uint32
}

func decodeFDs(b []byte) []procFD {
	var fds []procFD
	for ; len(b) >= procFDInfoSize; b = b[procFDInfoSize:] {
		fds = append(fds, procFD{
			FD:   int(int32(binary.LittleEndian.Uint32(b))),
			Type: binary.LittleEndian.Uint32(b[4:]),
		})
	}
	return fds
}

// vnodeFile is what a PROC_PIDFDVNODEPATHINFO reply says of an open file.
type vnodeFile struct {
	OpenFlags uint32 // the fd's FREAD/FWRITE
	Path      string
	ID        fileid.ID
	Nlink     uint64
	Mode      uint16
	UID       uint32
	GID       uint32
	Size      int64
}

func decodeVnodeFDInfoWithPath(b []byte) (vnodeFile, error) {
	if len(b) != vnodeFDInfoWithPathSize {
		return vnodeFile{}, fmt.Errorf("vnode_fdinfowithpath: %d bytes, want %d", len(b), vnodeFDInfoWithPathSize)
	}
	le := binary.LittleEndian
	return vnodeFile{
		OpenFlags: le.Uint32(b[pfiOpenFlags:]),
		Path:      cString(b[vipPath : vipPath+maxPathLen]),
		ID:        fileid.ID{Dev: uint64(le.Uint32(b[vstDev:])), Ino: le.Uint64(b[vstIno:])},
		Nlink:     uint64(le.Uint16(b[vstNlink:])),
		Mode:      le.Uint16(b[vstMode:]),
		UID:       le.Uint32(b[vstUID:]),
		GID:       le.Uint32(b[vstGID:]),
		Size:      int64(le.Uint64(b[vstSize:])),
	}, nil
}

// bsdInfo is what the scan needs of a struct proc_bsdinfo.
type bsdInfo struct {
	Pid       int
	Status    uint32
	UID, RUID int // effective and real
	GID       int
	Comm      string
	// StartMicros is the start time in microseconds since the epoch,
	// which is what StartTicks holds on macOS.
	StartMicros uint64
}

func decodeBSDInfo(b []byte) (bsdInfo, error) {
	if len(b) != procBSDInfoSize {
		return bsdInfo{}, fmt.Errorf("proc_bsdinfo: %d bytes, want %d", len(b), procBSDInfoSize)
	}
	le := binary.LittleEndian
	return bsdInfo{
		Pid:         int(le.Uint32(b[pbiPid:])),
		Status:      le.Uint32(b[pbiStatus:]),
		UID:         int(le.Uint32(b[pbiUID:])),
		RUID:        int(le.Uint32(b[pbiRUID:])),
		GID:         int(le.Uint32(b[pbiGID:])),
		Comm:        cString(b[pbiComm : pbiComm+maxComLen]),
		StartMicros: le.Uint64(b[pbiStartSec:])*1e6 + le.Uint64(b[pbiStartUsec:]),
	}, nil
}

// cString is a NUL-terminated char array's string (all of it when full).
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
