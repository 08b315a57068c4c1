package holders

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// holdHelper serves holdFiles: open every path, optionally OFD-lock byte
// 128 of each and turn undumpable, say ready, and hold until stdin closes.
func holdHelper(paths string) {
	flags := strings.Split(os.Getenv(holdFlagsEnv), ",")
	has := func(f string) bool {
		for _, g := range flags {
			if g == f {
				return true
			}
		}
		return false
	}
	mode := unix.O_RDONLY
	if has("write") {
		mode = unix.O_RDWR
	}
	for _, p := range strings.Split(paths, ":") {
		// O_NONBLOCK: a FIFO put at a store's path must not hang the helper.
		fd, err := unix.Open(p, mode|unix.O_NONBLOCK, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if has("ofd") {
			lk := unix.Flock_t{Type: unix.F_RDLCK, Start: 128, Len: 1}
			if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		if has("dup") {
			// A second fd on the same open file description: its fdinfo
			// shows the same OFD lock again.
			if _, err := unix.Dup(fd); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
	}
	if has("nondumpable") {
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	fmt.Printf("ready %d\n", os.Getpid())
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}
