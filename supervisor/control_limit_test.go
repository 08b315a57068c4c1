package supervisor

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// controlGet sends one keep-alive request on c and reads the answer.
func controlGet(c net.Conn, r *bufio.Reader) (int, error) {
	if _, err := fmt.Fprint(c, "GET /v1/ping HTTP/1.1\r\nHost: agentd\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// A client that keeps opening connections and never closes them (a poll
// loop with a fresh http.Transport each time) cannot make agentd hold more
// than maxControlConns of them: the next one is closed unanswered, and
// one is served again once a connection ends.
func TestControlSocketBoundsOpenConnections(t *testing.T) {
	dir, err := os.MkdirTemp("", "sgsec5-ctl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	srv, err := ListenControl(sock, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(t.Context()) })
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	var held []net.Conn
	for i := range maxControlConns {
		c, r := dial()
		if code, err := controlGet(c, r); err != nil || code != http.StatusNoContent {
			t.Fatalf("connection %d of %d: %d %v", i+1, maxControlConns, code, err)
		}
		held = append(held, c) // kept alive, idle
	}
	c, r := dial()
	if code, err := controlGet(c, r); err == nil {
		t.Fatalf("connection %d was served (%d) while %d others stay open: agentd holds every connection a client leaves open", maxControlConns+1, code, maxControlConns)
	}
	held[0].Close()
	hermestest.Eventually(t, "a new connection to be served after one closed", 30*time.Second, func() bool {
		c, r := dial()
		defer c.Close()
		code, err := controlGet(c, r)
		return err == nil && code == http.StatusNoContent
	})
}
