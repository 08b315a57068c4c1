// Package sdnotifytest is a fake service manager's notify socket for
// tests: a unixgram socket that collects what a process sends to
// $NOTIFY_SOCKET, with the sender's pid where the OS reports it.
package sdnotifytest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Message is one datagram: its assignments in order, and the pid the
// kernel says sent it (0 where the OS does not tell).
type Message struct {
	Lines []string
	PID   int
}

// Get returns the value of the last assignment to key, and whether any.
func (m Message) Get(key string) (string, bool) {
	val, found := "", false
	for _, l := range m.Lines {
		if k, v, ok := strings.Cut(l, "="); ok && k == key {
			val, found = v, true
		}
	}
	return val, found
}

// Socket is a listening notify socket. Addr is what to put in
// $NOTIFY_SOCKET.
type Socket struct {
	Addr string
	conn *net.UnixConn
	ch   chan Message
	mu   sync.Mutex
	all  []Message
}

// Listen opens a socket in a temporary directory (abstract: in the
// abstract namespace, Linux only) and closes it when the test ends.
func Listen(t testing.TB, abstract bool) *Socket {
	t.Helper()
	name := filepath.Join(t.TempDir(), "notify")
	if abstract {
		name = "@stateguard-test-notify-" + filepath.Base(filepath.Dir(name)) + "-" + strconv.Itoa(os.Getpid())
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen on notify socket %s: %v", name, err)
	}
	if err := passCred(conn); err != nil {
		t.Fatalf("notify socket %s: SO_PASSCRED: %v", name, err)
	}
	s := &Socket{Addr: name, conn: conn, ch: make(chan Message, 1024)}
	done := make(chan struct{})
	go s.read(done)
	t.Cleanup(func() {
		conn.Close()
		<-done
	})
	return s
}

func (s *Socket) read(done chan<- struct{}) {
	defer close(done)
	defer close(s.ch)
	buf := make([]byte, 64<<10)
	oob := make([]byte, 1024)
	for {
		n, oobn, _, _, err := s.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		m := Message{Lines: strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n"), PID: senderPID(oob[:oobn])}
		s.mu.Lock()
		s.all = append(s.all, m)
		s.mu.Unlock()
		select {
		case s.ch <- m:
		default: // a test that reads only All() must not block the reader
		}
	}
}

// Next waits for the next message.
func (s *Socket) Next(ctx context.Context) (Message, error) {
	select {
	case m, ok := <-s.ch:
		if !ok {
			return Message{}, errors.New("notify socket closed")
		}
		return m, nil
	case <-ctx.Done():
		return Message{}, ctx.Err()
	}
}

// WaitFor reads messages until one satisfies ok, and returns it.
func (s *Socket) WaitFor(ctx context.Context, ok func(Message) bool) (Message, error) {
	for {
		m, err := s.Next(ctx)
		if err != nil {
			return Message{}, err
		}
		if ok(m) {
			return m, nil
		}
	}
}

// All is every message received so far.
func (s *Socket) All() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.all...)
}
