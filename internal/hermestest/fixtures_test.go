package hermestest

import (
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// VacuumInto takes whole copies of a live store whose writer checkpoints
// after every commit, while something else in the test process opens and
// closes the store's -shm, as an in-process agent does (it reads the
// wal-index header, arms and releases its guard). With the copy taken
// through a connection in this process, that close(2) drops the copy's
// POSIX locks on the -shm (OFD locking covers the main file only), the
// writer checkpoints past its read mark, and the copy reads a torn
// snapshot: "database disk image is malformed" in about a third of the
// copies under -race, about one in a hundred without. The live store stays
// whole either way.
func TestVacuumIntoSurvivesSHMClosesInTheTestProcess(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	if err := CreateStore(db); err != nil {
		t.Fatal(err)
	}
	w := StartWriter(t, WriterOptions{DB: db, Rate: 1000, CheckpointEvery: 1, Linger: true})
	w.WaitAcks(t, 200)
	stop := Loop(200*time.Microsecond, func() {
		if f, err := os.Open(db + "-shm"); err == nil {
			f.Close()
		}
	})
	for i := range 20 {
		dst := filepath.Join(dir, "copy"+strconv.Itoa(i)+".db")
		VacuumInto(t, db, dst)
		if err := integrityOK(dst); err != nil {
			t.Fatalf("copy %d: %v", i, err)
		}
		os.Remove(dst)
	}
	stop()
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := integrityOK(db); err != nil {
		t.Fatalf("live store: %v", err)
	}
}

func integrityOK(path string) error {
	c, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	defer c.Close()
	var ic string
	if err := c.QueryRow("PRAGMA integrity_check").Scan(&ic); err != nil {
		return err
	}
	if ic != "ok" {
		return &os.PathError{Op: "integrity_check", Path: path, Err: os.ErrInvalid}
	}
	return nil
}
