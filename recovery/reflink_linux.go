package recovery

import (
	"os"

	"golang.org/x/sys/unix"
)

// cloneOrCreate creates name in d (O_EXCL|O_NOFOLLOW, 0600, owner) and
// tries to make it a reflink clone of src with FICLONE. cloned is false
// when the filesystem cannot clone (ext4, tmpfs, across filesystems): dst
// is then empty and the caller copies the bytes.
func cloneOrCreate(src *os.File, d capDir, name string, owner Owner) (dst *os.File, cloned bool, err error) {
	dst, err = d.createExcl(name, owner)
	if err != nil {
		return nil, false, err
	}
	rc, err := src.SyscallConn()
	if err != nil {
		return dst, false, nil
	}
	var cerr error
	if err := rc.Control(func(sfd uintptr) { cerr = unix.IoctlFileClone(int(dst.Fd()), int(sfd)) }); err != nil || cerr != nil {
		// A failed FICLONE leaves the destination untouched, but make sure
		// the copy starts from an empty file either way.
		if terr := dst.Truncate(0); terr != nil {
			dst.Close()
			return nil, false, terr
		}
		return dst, false, nil
	}
	return dst, true, nil
}
