package journald

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// sendTimeout bounds how long a record waits for a journald that stopped
// reading; after it, the record goes to the fallback handler.
const sendTimeout = 2 * time.Second

// sndbuf is the send buffer journald's own clients ask for (8 MiB), so
// most entries fit one datagram; the kernel caps it at wmem_max.
const sndbuf = 8 << 20

type sender struct {
	addr *unix.SockaddrUnix
	mu   sync.RWMutex // guards fd against close while sending
	fd   int
}

func newSender(path string) (*sender, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("journald socket: %w", err)
	}
	// Best effort: root may raise it past wmem_max, others get the cap.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sndbuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, sndbuf)
	}
	tv := unix.NsecToTimeval(sendTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("journald socket: send timeout: %w", err)
	}
	// Unconnected: each entry is addressed by name, so a journald that
	// restarted (a new socket at the same path) is reached again.
	return &sender{addr: &unix.SockaddrUnix{Name: path}, fd: fd}, nil
}

func (s *sender) send(entry []byte) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.fd < 0 {
		return errors.New("handler closed")
	}
	err := unix.Sendmsg(s.fd, entry, nil, s.addr, 0)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EMSGSIZE) && !errors.Is(err, unix.ENOBUFS) {
		return err
	}
	return s.sendMemfd(entry)
}

// sendMemfd passes an entry too big for a datagram as a sealed memfd:
// journald reads a descriptor it receives only once nobody can change it.
func (s *sender) sendMemfd(entry []byte) error {
	fd, err := unix.MemfdCreate("journal-entry", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("memfd for a %d-byte entry: %w", len(entry), err)
	}
	defer unix.Close(fd)
	for off := 0; off < len(entry); {
		n, err := unix.Write(fd, entry[off:])
		if err != nil {
			return fmt.Errorf("write %d-byte entry to memfd: %w", len(entry), err)
		}
		off += n
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fmt.Errorf("seal memfd: %w", err)
	}
	return unix.Sendmsg(s.fd, nil, unix.UnixRights(fd), s.addr, 0)
}

func (s *sender) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return nil
	}
	err := unix.Close(s.fd)
	s.fd = -1
	return err
}
