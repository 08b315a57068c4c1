package supervisor

import (
	"net"
	"sync"
	"time"
)

// What a metrics client may hold of agentd. The endpoint is on loopback
// but unauthenticated, so any local user can connect: ~20,000 idle
// connections once took every fd agentd had, and the holder scans, pins
// and captures then failed with EMFILE. A scraper needs one connection for
// well under a second every 15 s or more.
type metricsLimits struct {
	// maxConns open connections at most; one more waits in the kernel's
	// accept queue, where it holds no fd of agentd, until one closes.
	// fdReserve counts them (with the control socket's) in its share.
	maxConns int
	// readHeader: a connection that sends no request line and headers in
	// this long is closed (a fresh one, and a kept-alive one once it
	// starts its next request).
	readHeader time.Duration
	// read and write bound a whole request and its response (a client
	// that sends slowly or stops reading).
	read, write time.Duration
	// idle closes a kept-alive connection with no next request.
	idle time.Duration
}

var defaultMetricsLimits = metricsLimits{
	maxConns:   16,
	readHeader: 5 * time.Second,
	read:       10 * time.Second,
	write:      30 * time.Second,
	idle:       30 * time.Second,
}

// limitListener accepts at most n connections open at once: Accept waits
// for one to close first. (golang.org/x/net/netutil has one; these thirty
// lines are not worth the module.)
type limitListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{}
	once  sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back once, at the first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
