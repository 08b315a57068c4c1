//go:build linux

package supervisor

import (
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// gateCut runs on modwatch's goroutine, not the store's worker, so it may
// overlap a SQLite connection of the agent's own on the store (a replay's).
// Its -shm read must not drop that connection's locks: they are POSIX
// locks (OFD locking covers the main file only), and a close(2) of an fd
// of the -shm in the agent's file table drops them. Here a connection of
// this process copies the live store (VACUUM INTO) while its writer, in
// another process, checkpoints after every commit and gateCut reads the
// -shm over and over: with the locks dropped, the writer checkpoints past
// the copy's read mark and the copy reads a torn snapshot ("database disk
// image is malformed"; about a third of the copies under -race).
func TestGateCutKeepsTheProcessSHMLocks(t *testing.T) {
	home, db := testHome(t)
	w := &worker{st: store.Store{Path: db}, log: lazyLogger{base: discardLogger()}}
	wr := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 1000, CheckpointEvery: 1, Linger: true})
	wr.WaitAcks(t, 200)
	cuts := 0
	stop := hermestest.Loop(200*time.Microsecond, func() {
		if w.gateCut() != nil {
			cuts++
		}
	})
	var failed error
	for i := 0; i < 20 && failed == nil; i++ {
		dst := filepath.Join(home, "copy"+strconv.Itoa(i)+".db")
		c, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec("VACUUM INTO ?", dst); err != nil {
			failed = err
		}
		c.Close()
		os.Remove(dst)
	}
	stop()
	if cuts == 0 {
		t.Fatal("gateCut never read the live WAL")
	}
	if failed != nil {
		t.Fatalf("a copy taken by this process beside gateCut (%d cuts): %v", cuts, failed)
	}
	if err := wr.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := storeWhole(db); err != nil {
		t.Fatalf("live store: %v", err)
	}
}
