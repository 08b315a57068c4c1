package store

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"modernc.org/sqlite"
)

// SQLite's locks on a -shm (the WAL read marks, the writer's lock, the
// checkpointer's) are POSIX record locks, even with UseOFDLocks: modernc
// switches the main file's only. The kernel drops every POSIX lock a
// process holds on a file at any close(2), by that process, of any fd of
// that file. So when the agent reads a live store (a divert's diff, a
// replay, a stall check) while another of its goroutines closes an fd of
// the same -shm (a guard moving to a new generation, a check reading the
// wal-index header, an incident's pin), that connection's read mark is
// gone: a writer's checkpoint then backfills past the snapshot and
// restarts the WAL under it, and the read sees a torn database
// ("malformed", a short read) though the store itself is sound.
//
// The remedy is SQLite's own for its main file (unixInodeInfo.pUnused):
// keep such an fd open until no connection of this process on the store
// is open. Every connection the agent opens on a live store is opened
// with OpenLive, which registers the store while its sql.DB is open; every
// fd of a store's -shm the agent opens in its own file table is closed
// with CloseSHM, which parks it while the store is registered.
var shmFDs shmParking

type shmParking struct {
	mu     sync.Mutex
	conns  map[string]int
	parked map[string][]*os.File
}

// storeKey is the store's main path, absolute and clean: every agent
// open of one store starts from the one path discovery recorded.
func storeKey(mainPath string) string {
	if abs, err := filepath.Abs(mainPath); err == nil {
		return abs
	}
	return filepath.Clean(mainPath)
}

func (p *shmParking) hold(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		p.conns = map[string]int{}
	}
	p.conns[key]++
}

// release closes the parked fds with the store's last connection, under
// the lock: a connection registered in between must not lose its locks to
// them.
func (p *shmParking) release(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns[key]--; p.conns[key] > 0 {
		return
	}
	delete(p.conns, key)
	for _, f := range p.parked[key] {
		_ = f.Close()
	}
	delete(p.parked, key)
}

// CloseSHM closes f, an fd of the -shm (present or past) of the store at
// mainPath, once no SQLite connection of this process on that store is
// open (at once when none is). The close happens under the registry's
// lock, so no connection can start between the check and it.
func CloseSHM(mainPath string, f *os.File) error {
	if f == nil {
		return nil
	}
	key := storeKey(mainPath)
	p := &shmFDs
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns[key] > 0 {
		if p.parked == nil {
			p.parked = map[string][]*os.File{}
		}
		p.parked[key] = append(p.parked[key], f)
		return nil
	}
	return f.Close()
}

// ParkedSHM is how many -shm fds CloseSHM is keeping open: what a test
// checks to see they are closed with the store's last connection.
func ParkedSHM() int {
	p := &shmFDs
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, fs := range p.parked {
		n += len(fs)
	}
	return n
}

// OpenLive opens dsn, a SQLite URI naming the store at mainPath, as
// sql.Open("sqlite", dsn) does, and registers the store until the
// returned DB is closed (CloseSHM). Close the DB only after its
// transactions and rows: a connection still in use when Close returns is
// closed later, by database/sql, after the registration ended.
func OpenLive(mainPath, dsn string) (*sql.DB, error) {
	c, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", mainPath, err)
	}
	key := storeKey(mainPath)
	shmFDs.hold(key)
	return sql.OpenDB(&liveConnector{Connector: c, key: key}), nil
}

// liveConnector is modernc's connector (its connections unwrapped, every
// optional interface kept) plus the Close sql.DB calls once it has closed
// its connections.
type liveConnector struct {
	driver.Connector
	key  string
	once sync.Once
}

func (c *liveConnector) Close() error {
	c.once.Do(func() { shmFDs.release(c.key) })
	return nil
}
