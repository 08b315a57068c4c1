package sdnotifytest

import (
	"net"

	"golang.org/x/sys/unix"
)

// passCred asks the kernel to attach the sender's credentials to every
// datagram, as systemd's notify socket does: that is how NotifyAccess=main
// tells the main process from its children.
func passCred(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	}); err != nil {
		return err
	}
	return serr
}

func senderPID(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if cred, err := unix.ParseUnixCredentials(&m); err == nil {
			return int(cred.Pid)
		}
	}
	return 0
}
