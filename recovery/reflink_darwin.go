package recovery

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// cloneOrCreate makes name in d a clonefile(2) copy of src through
// fclonefileat, the form that takes an open fd (the orphan has no path).
// fclonefileat creates the file itself and fails on an existing name, the
// O_EXCL of the copy path; CLONE_NOOWNERCOPY keeps root from copying the
// source's owner, and mode and owner are then set like a created file.
// cloned is false when the volume cannot clone (not APFS, across volumes):
// dst is then an empty created file and the caller copies the bytes.
func cloneOrCreate(src *os.File, d capDir, name string, owner Owner) (dst *os.File, cloned bool, err error) {
	rc, err := src.SyscallConn()
	var cerr error = unix.ENOTSUP
	if err == nil {
		if err := rc.Control(func(sfd uintptr) { cerr = unix.Fclonefileat(int(sfd), d.fd, name, unix.CLONE_NOOWNERCOPY) }); err != nil {
			cerr = err
		}
	}
	if cerr == nil {
		fd, err := unix.Openat(d.fd, name, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			_ = unix.Unlinkat(d.fd, name, 0)
			return nil, false, fmt.Errorf("open clone %s: %w", d.join(name), err)
		}
		if err := fixModeOwner(fd, 0o600, owner); err != nil {
			unix.Close(fd)
			_ = unix.Unlinkat(d.fd, name, 0)
			return nil, false, fmt.Errorf("set owner of %s: %w", d.join(name), err)
		}
		return os.NewFile(uintptr(fd), d.join(name)), true, nil
	}
	if errors.Is(cerr, unix.EEXIST) {
		return nil, false, fmt.Errorf("create %s: %w", d.join(name), cerr)
	}
	dst, err = d.createExcl(name, owner)
	return dst, false, err
}
