package hermestest

import (
	"database/sql"
	"os"
	"testing"
)

// VacuumInto writes a consistent copy of the store at db to dst with
// VACUUM INTO: a backup, as an operator's tooling would take it.
func VacuumInto(tb testing.TB, db, dst string) {
	tb.Helper()
	c, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Exec("VACUUM INTO ?", dst); err != nil {
		tb.Fatal(err)
	}
}

// RenameFreshOver puts a new, empty Hermes store at db by rename(2), as a
// backup restore does. Only the main file is replaced: whatever -wal and
// -shm are at the path stay (remove them too for a restore that deletes
// the sidecars; leave them for a mispaired store).
func RenameFreshOver(tb testing.TB, db string) {
	tb.Helper()
	fresh := db + ".restore-tmp"
	if err := CreateStore(fresh); err != nil {
		tb.Fatal(err)
	}
	for _, s := range []string{"-wal", "-shm"} {
		os.Remove(fresh + s)
	}
	if err := os.Rename(fresh, db); err != nil {
		tb.Fatal(err)
	}
}
