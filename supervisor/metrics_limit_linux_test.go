package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serverConns counts this process's fds that are TCP sockets bound to
// port locally: the metrics server's accepted connections (a connection
// still in the kernel's accept queue has no fd, and the test's own client
// ends have the other port).
func serverConns(t *testing.T, port int) int {
	t.Helper()
	local := map[string]bool{} // socket inodes with port as local port
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 {
				continue
			}
			i := strings.LastIndexByte(fs[1], ':')
			if p, err := strconv.ParseInt(fs[1][i+1:], 16, 32); err == nil && int(p) == port && fs[9] != "0" {
				local[fs[9]] = true
			}
		}
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") && local[strings.Trim(l[7:], "[]")] {
			n++
		}
	}
	return n - 1 // the listener
}

// waitClosed waits until the server has closed c (a read sees EOF or a
// reset) or the deadline passes.
func waitClosed(c net.Conn, deadline time.Time) error {
	c.SetReadDeadline(deadline)
	_, err := io.Copy(io.Discard, c)
	if err == nil || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "reset") {
		return nil
	}
	return err
}

// Many idle connections to metrics.listen hold at most the cap of
// agentd's fds, and every one of them is closed after the header timeout;
// a kept-alive one after a scrape is closed after the idle timeout.
func TestMetricsServerBoundsIdleConnections(t *testing.T) {
	lim := metricsLimits{maxConns: 8, readHeader: 200 * time.Millisecond, read: time.Second, write: time.Second, idle: 300 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := NewMetrics().serve(ctx, "127.0.0.1:0", discardLogger(), lim)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(context.Background())
	_, ps, _ := net.SplitHostPort(srv.Addr())
	port, _ := strconv.Atoi(ps)

	// A scrape, then the connection left idle (kept alive).
	kept, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	fmt.Fprintf(kept, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(kept), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %v %v", err, resp)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	const idle = 120 // bounded, loopback only
	conns := make([]net.Conn, 0, idle)
	for range idle {
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	peak := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		peak = max(peak, serverConns(t, port))
	}
	if peak > lim.maxConns || peak == 0 {
		t.Errorf("%d idle connections held %d of the server's fds at the peak, want 1 to %d", idle, peak, lim.maxConns)
	}
	deadline := time.Now().Add(20 * time.Second)
	if err := waitClosed(kept, deadline); err != nil {
		t.Errorf("kept-alive connection after a scrape not closed: %v", err)
	}
	for i, c := range conns {
		if err := waitClosed(c, deadline); err != nil {
			t.Fatalf("idle connection %d of %d not closed by the server: %v", i, idle, err)
		}
	}
	resp2, err := http.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		t.Fatalf("scrape after the idle connections: %v", err)
	}
	resp2.Body.Close()
}

// The sockets' caps leave most of the fd reserve to the scans, pins and
// captures: raising either cap past it must raise the reserve too.
func TestSocketCapsLeaveTheReserve(t *testing.T) {
	if socketFDs > minFDReserve/2 {
		t.Fatalf("control (%d) and metrics (%d) connections may hold %d fds, over half the reserve of %d",
			maxControlConns, defaultMetricsLimits.maxConns, socketFDs, minFDReserve)
	}
}
