package journaldtest

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// payload is a datagram's entry, or, for an empty datagram carrying a
// descriptor, the descriptor's contents. Like journald, it takes a memfd
// only once it is sealed against every change.
func payload(data, oob []byte) ([]byte, bool, error) {
	if len(oob) == 0 {
		return data, false, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, false, fmt.Errorf("control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		if r, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, r...)
		}
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if len(fds) != 1 || len(data) != 0 {
		return nil, false, fmt.Errorf("want one descriptor in an empty datagram, got %d descriptors and %d bytes", len(fds), len(data))
	}
	want := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	seals, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GET_SEALS, 0)
	if err != nil || seals&want != want {
		return nil, false, fmt.Errorf("descriptor is not a sealed memfd (seals %#x, %v)", seals, err)
	}
	f := os.NewFile(uintptr(fds[0]), "memfd")
	fds = nil
	defer f.Close()
	b, err := readAllAt(f)
	if err != nil {
		return nil, false, fmt.Errorf("read memfd: %w", err)
	}
	return b, true, nil
}

func readAllAt(f *os.File) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// The descriptor shares the sender's file offset, which is at the end.
	return io.ReadAll(io.NewSectionReader(f, 0, st.Size()))
}

const msgTrunc = unix.MSG_TRUNC
