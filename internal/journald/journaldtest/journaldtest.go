// Package journaldtest is a fake journald for tests: a unixgram socket
// that decodes the native protocol, datagrams and memfds alike, the way
// journald does.
package journaldtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Entry is one journal entry: every field's values in order (a field may
// repeat), and whether it came in a descriptor rather than a datagram.
type Entry struct {
	Fields map[string][]string
	ViaFD  bool
}

// Get returns the field's first value.
func (e Entry) Get(name string) string {
	if v := e.Fields[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Journal is a listening fake journal; Socket is its path.
type Journal struct {
	Socket string
	conn   *net.UnixConn
	ch     chan Entry
	mu     sync.Mutex
	all    []Entry
	errs   []error
}

// Listen opens the socket in a temporary directory; it closes when the
// test ends, and the test fails if anything sent to it did not decode.
func Listen(t testing.TB) *Journal {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.socket")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen on %s: %v", path, err)
	}
	// Room for a burst of entries while the test is not reading.
	_ = conn.SetReadBuffer(4 << 20)
	j := &Journal{Socket: path, conn: conn, ch: make(chan Entry, 4096)}
	done := make(chan struct{})
	go j.read(done)
	t.Cleanup(func() {
		conn.Close()
		<-done
		for _, err := range j.errors() {
			t.Errorf("fake journal: %v", err)
		}
	})
	return j
}

func (j *Journal) read(done chan<- struct{}) {
	defer close(done)
	defer close(j.ch)
	// Larger than any datagram a sender can send (its send buffer caps
	// it; journald clients ask for 8 MiB).
	buf := make([]byte, 16<<20)
	oob := make([]byte, 4096)
	for {
		n, oobn, flags, _, err := j.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		if flags&msgTrunc != 0 {
			j.fail(fmt.Errorf("a datagram longer than %d bytes: entries that big must come as a memfd", len(buf)))
			continue
		}
		data, viaFD, err := payload(buf[:n], oob[:oobn])
		if err != nil {
			j.fail(err)
			continue
		}
		fields, err := Decode(data)
		if err != nil {
			j.fail(err)
			continue
		}
		e := Entry{Fields: fields, ViaFD: viaFD}
		j.mu.Lock()
		j.all = append(j.all, e)
		j.mu.Unlock()
		select {
		case j.ch <- e:
		default:
		}
	}
}

func (j *Journal) fail(err error) {
	j.mu.Lock()
	j.errs = append(j.errs, err)
	j.mu.Unlock()
}

func (j *Journal) errors() []error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]error(nil), j.errs...)
}

// Next waits for the next entry.
func (j *Journal) Next(ctx context.Context) (Entry, error) {
	select {
	case e, ok := <-j.ch:
		if !ok {
			return Entry{}, errors.New("fake journal closed")
		}
		return e, nil
	case <-ctx.Done():
		return Entry{}, ctx.Err()
	}
}

// WaitFor reads entries until one has every field=value in match.
func (j *Journal) WaitFor(ctx context.Context, match map[string]string) (Entry, error) {
	for {
		e, err := j.Next(ctx)
		if err != nil {
			return Entry{}, fmt.Errorf("no entry with %v: %w", match, err)
		}
		if e.Matches(match) {
			return e, nil
		}
	}
}

// Matches reports whether every field in match has that value, as
// `journalctl FIELD=value` selects.
func (e Entry) Matches(match map[string]string) bool {
	for k, want := range match {
		found := false
		for _, v := range e.Fields[k] {
			found = found || v == want
		}
		if !found {
			return false
		}
	}
	return true
}

// All is every entry received so far.
func (j *Journal) All() []Entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Entry(nil), j.all...)
}

// Decode parses entries in the native protocol's encoding, refusing what
// journald would: a field name outside [A-Z0-9_], starting with an
// underscore or a digit, or longer than 64 bytes; a length past the data.
func Decode(b []byte) (map[string][]string, error) {
	out := map[string][]string{}
	for len(b) > 0 {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			return nil, fmt.Errorf("entry ends without a newline: %q", b)
		}
		line := b[:nl]
		var name, value string
		if eq := bytes.IndexByte(line, '='); eq >= 0 {
			name, value = string(line[:eq]), string(line[eq+1:])
			b = b[nl+1:]
		} else {
			name = string(line)
			rest := b[nl+1:]
			if len(rest) < 8 {
				return nil, fmt.Errorf("field %s: no length", name)
			}
			n := binary.LittleEndian.Uint64(rest)
			rest = rest[8:]
			if n >= uint64(len(rest)) || rest[n] != '\n' {
				return nil, fmt.Errorf("field %s: length %d does not fit the %d bytes left", name, n, len(rest))
			}
			value = string(rest[:n])
			b = rest[n+1:]
		}
		if err := validName(name); err != nil {
			return nil, err
		}
		out[name] = append(out[name], value)
	}
	return out, nil
}

func validName(n string) error {
	if n == "" || len(n) > 64 || n[0] == '_' || (n[0] >= '0' && n[0] <= '9') {
		return fmt.Errorf("field name %q: journald would drop it", n)
	}
	if strings.Trim(n, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
		return fmt.Errorf("field name %q: journald would drop it", n)
	}
	return nil
}
