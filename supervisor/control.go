package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// maxControlConns bounds the control socket's open connections, and
// controlIdleTimeout how long a kept-alive one may wait for its next
// request: each costs the agent a goroutine and its buffers (some 16 KiB),
// and a client that opens a connection per request and never closes them
// (a poll loop with a fresh http.Transport each time) once held 4,284 of
// them, 70 MB of agentd's heap, during one replay. A connection over the
// bound is closed at once; agentctl uses one connection at a time.
const (
	maxControlConns    = 64
	controlIdleTimeout = 30 * time.Second
)

// ControlServer serves the control API on a unix socket. Only root and the
// user the agent runs as may talk to it: the socket is 0600 and every
// connection's peer uid is checked, because file modes alone do not stop a
// process that inherited an fd.
type ControlServer struct {
	path string
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
	log  *slog.Logger
}

type peerKey struct{}

// checkSocketPath refuses a control socket path at which something other
// than a socket exists (a regular file, a directory, a symlink), which
// ListenControl would refuse only after the agent had opened its state.
func checkSocketPath(path string) error {
	if path == "-" || path == "" {
		return nil
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() == fs.ModeSocket {
		return nil
	}
	return fmt.Errorf("control socket %s exists and is a %s, not a socket (hint: move it away, or pass another --socket / socket in the config)",
		path, fileKind(fi.Mode()))
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	}
	return "special file"
}

// ListenControl creates the socket (its directory 0700) and serves h.
// A socket file left by a dead agent is replaced; one that answers means
// another agent runs, and ListenControl refuses.
func ListenControl(path string, h http.Handler, log *slog.Logger) (*ControlServer, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create control socket dir %s: %w", filepath.Dir(path), err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("control socket %s exists and is not a socket (hint: move it away)", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %s answers: another agentd is running", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale control socket %s: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on control socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod control socket %s: %w", path, err)
	}
	self := os.Geteuid()
	c := &ControlServer{path: path, ln: ln, done: make(chan struct{}), log: log}
	c.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			uid, ok := r.Context().Value(peerKey{}).(int)
			if !ok || (uid != 0 && uid != self) {
				http.Error(w, "forbidden: only root and the agent's own user may use the control socket", http.StatusForbidden)
				return
			}
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       controlIdleTimeout,
		ConnState:         connLimit(maxControlConns, log),
		ConnContext: func(ctx context.Context, conn net.Conn) context.Context {
			uc, ok := conn.(*net.UnixConn)
			if !ok {
				return ctx
			}
			uid, err := peerUID(uc)
			if err != nil {
				log.Warn("control peer credentials unavailable", "subsystem", "control", "err", err)
				return ctx
			}
			return context.WithValue(ctx, peerKey{}, uid)
		},
	}
	go func() {
		defer close(c.done)
		if err := c.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("control socket stopped", "subsystem", "control", "err", err)
		}
	}()
	return c, nil
}

// connLimit is an http.Server ConnState hook that closes every connection
// beyond max open ones as soon as it is accepted (before a request is
// read from it).
func connLimit(max int64, log *slog.Logger) func(net.Conn, http.ConnState) {
	var open atomic.Int64
	return func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			if open.Add(1) > max {
				log.Warn("control socket: too many open connections; closing the new one", "subsystem", "control", "limit", max)
				c.Close()
			}
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
}

// Path is the socket's path.
func (c *ControlServer) Path() string { return c.path }

// Close stops serving, waits for requests in flight until ctx ends, and
// removes the socket file.
func (c *ControlServer) Close(ctx context.Context) error {
	err := c.srv.Shutdown(ctx)
	if err != nil {
		_ = c.srv.Close()
	}
	<-c.done
	if rmErr := os.Remove(c.path); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) && err == nil {
		err = rmErr
	}
	return err
}
