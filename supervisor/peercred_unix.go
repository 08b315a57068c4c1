//go:build linux || darwin

package supervisor

import "net"

// peerUID is the uid of the process at the other end of c, as the kernel
// recorded it when that process connected.
func peerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	uid, credErr := -1, error(nil)
	if err := raw.Control(func(fd uintptr) { uid, credErr = socketPeerUID(int(fd)) }); err != nil {
		return -1, err
	}
	if credErr != nil {
		return -1, credErr
	}
	return uid, nil
}
