package supervisor

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// reopenReadOnly opens f's inode again through /proc/self/fd, which
// reaches it unlinked too: a new open file description, so the OFD locks
// of the agent's guard stay with the agent.
func reopenReadOnly(f *os.File) (*os.File, error) {
	p := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("reopen %s (%s): %w", f.Name(), p, err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
