package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

func guardOn(o *Options) { o.Guard = true }

// waitGuard waits until the store's guard reports state.
func waitGuard(t testing.TB, a *Agent, db, state string, d time.Duration) *control.GuardStatus {
	t.Helper()
	var st *control.GuardStatus
	hermestest.Eventually(t, "guard "+state, d, func() bool {
		st = a.guardStatus(db)
		return st != nil && st.State == state
	})
	return st
}

func fileID(t testing.TB, path string) fileid.ID {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fileid.FromStat(&st)
}

// ofdLock is one OFD lock of /proc/locks.
type ofdLock struct {
	mode       string // READ or WRITE
	start, end string
}

// ofdLocks lists the OFD locks on id in /proc/locks (waiters excluded).
// The test process itself takes none on the store files it asks about.
func ofdLocks(t testing.TB, id fileid.ID) []ofdLock {
	t.Helper()
	var out []ofdLock
	for _, l := range hermestest.LocksOn(t, id.Dev, id.Ino) {
		if l.Class == "OFDLCK" {
			out = append(out, ofdLock{mode: l.Mode, start: l.Start, end: l.End})
		}
	}
	return out
}

// guarded reports whether the agent's guard locks are on main and shm:
// exactly one OFD read lock each, on the SHARED range and byte 128.
func guarded(t testing.TB, main, shm fileid.ID) bool {
	t.Helper()
	m, s := ofdLocks(t, main), ofdLocks(t, shm)
	return len(m) == 1 && m[0] == ofdLock{"READ", "1073741826", "1073742335"} &&
		len(s) == 1 && s[0] == ofdLock{"READ", "128", "128"}
}

// waitGuarded waits until exactly the guard's locks are on main and shm:
// the agent's own SQLite connection (an idle checkpoint right after the
// guard armed) holds an identical SHARED read lock on main for a moment.
func waitGuarded(t testing.TB, main, shm fileid.ID) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !guarded(t, main, shm) {
		if time.Now().After(deadline) {
			t.Fatalf("armed, but the locks are main %+v shm %+v", ofdLocks(t, main), ofdLocks(t, shm))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// selfFDsOn lists this process's fds on id, except those in skip.
func selfFDsOn(t testing.TB, id fileid.ID, skip ...uintptr) []string {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		n, err := strconv.Atoi(e.Name())
		if err != nil || containsFD(skip, uintptr(n)) {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join("/proc/self/fd", e.Name()), &st) != nil {
			continue
		}
		if fileid.FromStat(&st) == id {
			link, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
			out = append(out, e.Name()+" -> "+link)
		}
	}
	return out
}

func containsFD(fds []uintptr, fd uintptr) bool {
	for _, f := range fds {
		if f == fd {
			return true
		}
	}
	return false
}

// postGuard sends a guard request over the agent's control socket.
func postGuard(t testing.TB, a *Agent, verb string, req control.GuardRequest) (control.GuardAnswer, int) {
	t.Helper()
	// No keep-alive: a client per request would leave an idle connection
	// behind each time (the control socket bounds them).
	c := http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", a.SocketPath())
	}}}
	body, _ := json.Marshal(req)
	resp, err := c.Post("http://agent/v1/guard/"+verb, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans control.GuardAnswer
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
			t.Fatal(err)
		}
	}
	return ans, resp.StatusCode
}

// byNameGeneration is the store's three files as lstat by name sees them
// (a symlink in a directory component followed): the attacker's view of
// a swapped profile directory, which store.ReadGeneration (through a
// directory handle) refuses.
func byNameGeneration(t testing.TB, db string) store.Generation {
	t.Helper()
	var g store.Generation
	for _, f := range []struct {
		st  *fileid.State
		sfx string
	}{{&g.Main, ""}, {&g.WAL, "-wal"}, {&g.SHM, "-shm"}} {
		st, err := fileid.Lstat(db + f.sfx)
		if err != nil {
			t.Logf("lstat %s%s: %v", db, f.sfx, err)
		}
		*f.st = st
	}
	return g
}
