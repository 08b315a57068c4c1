package hermestest

import (
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// VacuumInto writes a consistent copy of the store at db to dst with
// VACUUM INTO: a backup, as an operator's tooling would take it, from a
// process of its own (the test writer's -vacuum-into), never through a
// connection in the test process. modernc's OFD locking covers the main
// file only; a connection's wal-index locks on -shm stay POSIX locks, and
// a close(2) of any fd of the -shm anywhere in the process (an agent
// started by the test reads the -shm's header, arms and releases its
// guard) drops them. The copy's read mark is then unprotected: a writer in
// another process checkpoints past it or restarts the WAL under it, and
// the copy reads a torn snapshot ("database disk image is malformed").
// Hermes' readers are other processes than the agent; so is this one.
func VacuumInto(tb testing.TB, db, dst string) {
	tb.Helper()
	bin, err := WriterBinary()
	if err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command(bin, "-db", db, "-vacuum-into", dst).CombinedOutput(); err != nil {
		tb.Fatalf("VACUUM INTO %s from its own process: %v: %s", dst, err, out)
	}
}

// RestoreOver is a restore that deletes the sidecars: RenameFreshOver,
// then the -wal and -shm at the path removed. It returns when the rename
// happened.
func RestoreOver(tb testing.TB, db string) time.Time {
	tb.Helper()
	RenameFreshOver(tb, db)
	renamed := time.Now()
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	return renamed
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

// NewStore creates a Hermes store, state.db, in a new temporary directory
// and returns its path.
func NewStore(tb testing.TB) string {
	tb.Helper()
	db := filepath.Join(tb.TempDir(), "state.db")
	if err := CreateStore(db); err != nil {
		tb.Fatal(err)
	}
	return db
}

// OpenDB opens dsn with the test's SQLite driver, closed at cleanup.
func OpenDB(tb testing.TB, dsn string) *sql.DB {
	tb.Helper()
	c, err := sql.Open("sqlite", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// OpenNoCheckpoint opens the store at path on one connection with
// automatic checkpoints off, so what it commits stays in the WAL; closed
// at cleanup.
func OpenNoCheckpoint(tb testing.TB, path string) *sql.DB {
	tb.Helper()
	db := OpenDB(tb, DSN(path)+"&_pragma=wal_autocheckpoint(0)")
	db.SetMaxOpenConns(1)
	return db
}

// ExecSQL runs the statements, in order, on one connection to dsn, which
// it closes again.
func ExecSQL(tb testing.TB, dsn string, stmts ...string) {
	tb.Helper()
	c, err := sql.Open("sqlite", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	c.SetMaxOpenConns(1)
	for _, q := range stmts {
		if _, err := c.Exec(q); err != nil {
			tb.Fatalf("%s: %v", q, err)
		}
	}
	if err := c.Close(); err != nil {
		tb.Fatal(err)
	}
}

// QueryRows is every row q returns, each column as the driver returns it.
func QueryRows(tb testing.TB, c *sql.DB, q string) []map[string]any {
	tb.Helper()
	rows, err := c.Query(q)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []map[string]any
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			tb.Fatal(err)
		}
		m := map[string]any{}
		for i, c := range cols {
			m[c] = vals[i]
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// OpenGeneration opens the main, -wal and -shm of the store at db
// read-only, closed at cleanup: fds standing in for ones pinned through
// /proc.
func OpenGeneration(tb testing.TB, db string) (main, wal, shm *os.File) {
	tb.Helper()
	open := func(p string) *os.File {
		f, err := os.Open(p)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { f.Close() })
		return f
	}
	return open(db), open(db + "-wal"), open(db + "-shm")
}
