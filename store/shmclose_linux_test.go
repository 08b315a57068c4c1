package store

import (
	"context"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// posixLocksOn counts the POSIX record locks held on path's inode (the
// agent's SQLite connections take their -shm locks as POSIX locks).
func posixLocksOn(t *testing.T, path string) int {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range hermestest.LocksOn(t, st.Dev, st.Ino) {
		if l.Class == "POSIX" {
			n++
		}
	}
	return n
}

// A close of any fd of a -shm drops every POSIX lock this process holds
// on it, the read mark of an open read transaction included: a writer's
// checkpoint can then restart the WAL under the snapshot, which is how the
// divert read a sound store as malformed. CloseSHM keeps such an fd open
// until the store's last connection (OpenLive) is closed.
func TestCloseSHMKeepsAConnectionsLocks(t *testing.T) {
	db := hermestest.NewStore(t)
	ro, err := OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	ctx := context.Background()
	tx, err := ro.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM messages").Scan(&n); err != nil {
		t.Fatal(err)
	}
	before := posixLocksOn(t, db+"-shm")
	if before == 0 {
		t.Fatal("the read transaction holds no POSIX lock on the -shm: nothing to protect")
	}

	for range 3 {
		f, err := os.Open(db + "-shm")
		if err != nil {
			t.Fatal(err)
		}
		if err := CloseSHM(db, f); err != nil {
			t.Fatal(err)
		}
	}
	if got := posixLocksOn(t, db+"-shm"); got != before {
		t.Fatalf("POSIX locks on the -shm after three CloseSHM: %d, before %d: the connection's locks were dropped", got, before)
	}
	if got := ParkedSHM(); got != 3 {
		t.Fatalf("parked -shm fds: %d, want 3", got)
	}

	// A second connection on the store keeps the fds parked past the
	// first one's close.
	ro2, err := OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := ro2.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	ro.Close()
	if got := ParkedSHM(); got != 3 {
		t.Fatalf("parked -shm fds with a connection still open: %d, want 3", got)
	}
	ro2.Close()
	if got := ParkedSHM(); got != 0 {
		t.Fatalf("parked -shm fds after the store's last connection closed: %d, want 0", got)
	}

	// With no connection open, CloseSHM closes at once.
	f, err := os.Open(db + "-shm")
	if err != nil {
		t.Fatal(err)
	}
	if err := CloseSHM(db, f); err != nil {
		t.Fatal(err)
	}
	if got := ParkedSHM(); got != 0 {
		t.Fatalf("parked -shm fds with no connection open: %d, want 0", got)
	}
	if _, err := f.Stat(); err == nil {
		t.Fatal("CloseSHM with no connection open left the file open")
	}
}
