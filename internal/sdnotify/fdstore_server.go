package sdnotify

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// FDStore is the service manager's side of the file descriptor store, for
// a process that supervises agentd the way systemd does (the chaos
// harness, tests): it reads $NOTIFY_SOCKET datagrams, keeps the fds sent
// with FDSTORE=1 under their FDNAME=, closes them on FDSTOREREMOVE=1, and
// hands them to the next start (Files, Env). Other messages are ignored.
type FDStore struct {
	Addr string
	conn *net.UnixConn
	max  int
	done chan struct{}

	mu    sync.Mutex
	names []string
	files []*os.File
}

// ListenFDStore opens a notify socket at path keeping at most max fds
// (FileDescriptorStoreMax=; more are closed at once, as systemd does).
func ListenFDStore(path string, max int) (*FDStore, error) {
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("listen on notify socket %s: %w", path, err)
	}
	s := &FDStore{Addr: path, conn: conn, max: max, done: make(chan struct{})}
	go s.read()
	return s, nil
}

func (s *FDStore) read() {
	defer close(s.done)
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(253*4))
	for {
		n, oobn, _, _, err := s.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		s.handle(buf[:n], oob[:oobn])
	}
}

func (s *FDStore) handle(msg, oob []byte) {
	var fds []int
	if cmsgs, err := unix.ParseSocketControlMessage(oob); err == nil {
		for _, c := range cmsgs {
			if rights, err := unix.ParseUnixRights(&c); err == nil {
				fds = append(fds, rights...)
			}
		}
	}
	vars := map[string]string{}
	for _, l := range bytes.Split(bytes.TrimSpace(msg), []byte("\n")) {
		if k, v, ok := strings.Cut(string(l), "="); ok {
			vars[k] = v
		}
	}
	name := vars["FDNAME"]
	if name == "" {
		name = "stored"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if vars["FDSTOREREMOVE"] == "1" {
		kept, keptNames := s.files[:0], s.names[:0]
		for i, f := range s.files {
			if s.names[i] == name {
				f.Close()
				continue
			}
			kept, keptNames = append(kept, f), append(keptNames, s.names[i])
		}
		s.files, s.names = kept, keptNames
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
		if vars["FDSTORE"] != "1" || !ValidFDName(name) || len(s.files) >= s.max {
			unix.Close(fd)
			continue
		}
		s.files, s.names = append(s.files, os.NewFile(uintptr(fd), name)), append(s.names, name)
	}
}

// Names are the names of the fds kept, in order.
func (s *FDStore) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.names...)
}

// Files are copies of the kept fds in order, for exec.Cmd.ExtraFiles
// (fd 3 on), and the environment that names them; the caller closes the
// copies (the store may close its own at any time on FDSTOREREMOVE=1).
// LISTEN_PID must be the child's pid, which only the child knows: start
// it through ListenWrapper.
func (s *FDStore) Files() ([]*os.File, []string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.files) == 0 {
		return nil, nil, nil
	}
	out := make([]*os.File, 0, len(s.files))
	for i, f := range s.files {
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, c := range out {
				c.Close()
			}
			return nil, nil, fmt.Errorf("copy kept fd %s: %w", s.names[i], err)
		}
		out = append(out, os.NewFile(uintptr(fd), s.names[i]))
	}
	env := []string{fmt.Sprintf("%s=%d", EnvListenFDs, len(s.files)), EnvListenFDNames + "=" + strings.Join(s.names, ":")}
	return out, env, nil
}

// ListenWrapper prefixes argv so the started program sees LISTEN_PID set
// to its own pid (the shell execs it: same pid).
func ListenWrapper(argv ...string) []string {
	return append([]string{"/bin/sh", "-c", EnvListenPID + `=$$; export ` + EnvListenPID + `; exec "$0" "$@"`}, argv...)
}

// Close stops reading and closes every kept fd.
func (s *FDStore) Close() error {
	err := s.conn.Close()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.files {
		f.Close()
	}
	s.files, s.names = nil, nil
	return err
}
