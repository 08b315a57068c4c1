package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/stateguard/stateguard/control"
)

// socketEnv overrides the default control socket path, for scripts that
// talk to an agent started with --socket.
const socketEnv = "STATEGUARD_SOCKET"

// socketPath is where agentctl looks for agentd: --socket, else
// $STATEGUARD_SOCKET, else the default the agent itself uses.
func socketPath(flagValue string, getenv func(string) string) string {
	if flagValue != "" {
		return flagValue
	}
	if s := getenv(socketEnv); s != "" {
		return s
	}
	dir := control.DefaultRuntimeDir(getenv, os.Geteuid())
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, control.SocketFile)
}

// errDaemonNotRunning matches (errors.Is) every notRunningError.
var errDaemonNotRunning = errors.New("daemon not running")

// notRunningError says no agentd listens on the socket: the socket file is
// missing or nobody accepts on it (a stale socket left by a killed agent).
type notRunningError struct {
	Socket string
	Err    error
}

func (e *notRunningError) Error() string {
	if e.Socket == "" {
		return "daemon not running (no control socket path: set XDG_RUNTIME_DIR or HOME, or pass --socket)"
	}
	return fmt.Sprintf("daemon not running (no agentd answers on %s: %v)", e.Socket, e.Err)
}

func (e *notRunningError) Unwrap() error        { return e.Err }
func (e *notRunningError) Is(target error) bool { return target == errDaemonNotRunning }

// apiError is an answer of agentd other than 2xx.
type apiError struct {
	Status int
	Msg    string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("agentd: %s (HTTP %d)", e.Msg, e.Status)
}

// client talks HTTP/JSON to agentd over its unix socket.
type client struct {
	socket string
	hc     *http.Client
}

func newClient(socket string) *client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := net.Dialer{Timeout: 2 * time.Second}
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}
	// Release may wait for the agent's worker to finish a step (a
	// capture in progress), so the overall timeout is generous; a daemon
	// that does not exist fails at the dial.
	return &client{socket: socket, hc: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
}

// get decodes the answer to GET path into out.
func (c *client) get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, nil, out)
}

// post sends in as JSON and decodes the answer into out (when not nil).
func (c *client) post(ctx context.Context, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, path, b, out)
}

func (c *client) do(ctx context.Context, method, path string, body []byte, out any) error {
	if c.socket == "" {
		return &notRunningError{}
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	// The host part is ignored: the transport always dials the socket.
	req, err := http.NewRequestWithContext(ctx, method, "http://agentd"+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.dialError(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read agentd answer to %s %s on %s: %w", method, path, c.socket, err)
	}
	if resp.StatusCode/100 != 2 {
		// Errors are {"error": "..."}, except the peer check's plain text.
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return &apiError{Status: resp.StatusCode, Msg: msg}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode agentd answer to %s %s: %w (hint: agentctl and agentd versions differ?)", method, path, err)
	}
	return nil
}

// dialError turns "nobody is there" into notRunningError and names the
// socket in everything else.
func (c *client) dialError(err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOTDIR) {
		return &notRunningError{Socket: c.socket, Err: unwrapOp(err)}
	}
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("control socket %s: %w (hint: agentd accepts only root and its own user; run agentctl as that user)", c.socket, unwrapOp(err))
	}
	return fmt.Errorf("talk to agentd on %s: %w", c.socket, err)
}

// unwrapOp drops url.Error and net.OpError wrappers, which repeat the
// socket path and the fake URL.
func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}
