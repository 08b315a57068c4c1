package sdnotify

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The variables systemd passes the fds of a service's file descriptor
// store (and its sockets) in, sd_listen_fds(3): fds 3 .. 3+LISTEN_FDS-1,
// meant for LISTEN_PID only, named by the colon-separated LISTEN_FDNAMES.
const (
	EnvListenFDs     = "LISTEN_FDS"
	EnvListenPID     = "LISTEN_PID"
	EnvListenFDNames = "LISTEN_FDNAMES"
	listenFDsStart   = 3
)

// ErrFDName is wrapped by StoreFDs for a name systemd would refuse.
var ErrFDName = errors.New("invalid fd store name")

// ValidFDName reports whether systemd accepts name as an FDNAME=: 1 to
// 255 printable ASCII characters, no colon (LISTEN_FDNAMES' separator).
func ValidFDName(name string) bool {
	if name == "" || len(name) > 255 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return false
		}
	}
	return true
}

// StoreFDs hands files to the service manager's file descriptor store
// under name (FDSTORE=1): the manager keeps them open while the service
// restarts and passes them back in $LISTEN_FDS. The unit needs
// FileDescriptorStoreMax= above 0, or systemd drops them. The caller
// still owns files; the store holds copies.
func (n *Notifier) StoreFDs(name string, files ...*os.File) error {
	if n == nil || len(files) == 0 {
		return nil
	}
	if !ValidFDName(name) {
		return fmt.Errorf("%w: %q", ErrFDName, name)
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	return n.send("FDSTORE=1\nFDNAME="+name+"\n", unix.UnixRights(fds...))
}

// RemoveFDs closes every fd the store keeps under name (FDSTOREREMOVE=1).
func (n *Notifier) RemoveFDs(name string) error {
	if n == nil {
		return nil
	}
	if !ValidFDName(name) {
		return fmt.Errorf("%w: %q", ErrFDName, name)
	}
	return n.send("FDSTOREREMOVE=1\nFDNAME="+name+"\n", nil)
}

// ListenedFD is one fd the service manager passed at start.
type ListenedFD struct {
	Name string // "unknown" where the manager gave none
	File *os.File
}

// ListenFDs takes the fds the service manager passed this process
// (sd_listen_fds_with_names(3)), marks them close-on-exec and clears the
// variables, so no child takes them for its own. None when they are
// meant for another pid or absent.
func ListenFDs(getenv func(string) string, pid int) ([]ListenedFD, error) {
	defer func() {
		for _, k := range []string{EnvListenFDs, EnvListenPID, EnvListenFDNames} {
			os.Unsetenv(k)
		}
	}()
	nfds, lpid := getenv(EnvListenFDs), getenv(EnvListenPID)
	if nfds == "" || lpid == "" {
		return nil, nil
	}
	if p, err := strconv.Atoi(lpid); err != nil || p != pid {
		return nil, nil
	}
	n, err := strconv.Atoi(nfds)
	if err != nil || n < 0 || n > 1<<16 {
		return nil, fmt.Errorf("%s=%q is not a count of fds", EnvListenFDs, nfds)
	}
	var names []string
	if v := getenv(EnvListenFDNames); v != "" {
		names = strings.Split(v, ":")
	}
	out := make([]ListenedFD, 0, n)
	for i := range n {
		fd := listenFDsStart + i
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return out, fmt.Errorf("%s=%d: fd %d: %w", EnvListenFDs, n, fd, err)
		}
		unix.CloseOnExec(fd)
		name := "unknown"
		if i < len(names) && names[i] != "" {
			name = names[i]
		}
		out = append(out, ListenedFD{Name: name, File: os.NewFile(uintptr(fd), name)})
	}
	return out, nil
}
