package journal

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
)

// Journal is the agent's durable record of incidents, their steps, replay
// jobs and guard pauses: its own SQLite database, <stateDir>/journal.db.
// Every change commits before the method returns (synchronous=FULL), so
// what the journal says happened survives a crash or power loss. A Journal
// is safe for concurrent use; writes are serialized in the process and
// take SQLite's write lock up front (BEGIN IMMEDIATE), so they never fail
// halfway with SQLITE_BUSY.
type Journal struct {
	path string
	db   *sql.DB
	log  *slog.Logger

	// wmu serializes this process's write transactions, so the store
	// workers queue in Go instead of in SQLite's sleeping busy handler.
	wmu sync.Mutex
	now func() time.Time
}

// FileName is the journal's name in agentd's state directory.
const FileName = "journal.db"

// applicationID is PRAGMA application_id of a journal ("SGJ1"), so the agent
// never migrates someone else's database that happens to sit at the path.
const applicationID = 0x53474a31

// ErrTooNew is returned by Open for a journal written by a
// newer stateguard (a schema version this build does not know).
var ErrTooNew = errors.New("journal schema is newer than this agent")

// Open opens the journal at path, creating it (mode 0600) and
// applying schema migrations as needed (logged to log; nil logs nothing).
// It refuses a file that is not a stateguard journal and a journal from a
// newer version.
func Open(ctx context.Context, path string, log *slog.Logger) (*Journal, error) {
	if err := createJournalFile(path); err != nil {
		return nil, err
	}
	c, err := sqlite.NewConnector(dsn(path))
	if err != nil {
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	db := sql.OpenDB(persistWALConnector{c})
	// A few connections so status reads do not queue behind a write.
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	j := &Journal{
		path: path,
		db:   db,
		log:  subsystemLogger(log),
		now:  time.Now,
	}
	if err := j.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return j, nil
}

func subsystemLogger(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log.With("subsystem", "journal")
}

// Path is the journal database's path.
func (j *Journal) Path() string { return j.path }

// Close closes the journal's connections.
func (j *Journal) Close() error {
	if err := j.db.Close(); err != nil {
		return fmt.Errorf("close journal %s: %w", j.path, err)
	}
	return nil
}

// queryAll runs q and scans each row it returns with scan; what names
// the query in an error.
func queryAll[T any](ctx context.Context, j *Journal, what string, scan func(rowScanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := j.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("journal %s: %s: %w", j.path, what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("journal %s: %s: %w", j.path, what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("journal %s: %s: %w", j.path, what, err)
	}
	return out, nil
}

// Check runs SQLite's integrity_check on the journal (for agentctl doctor).
func (j *Journal) Check(ctx context.Context) error {
	rows, err := j.db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return fmt.Errorf("integrity_check %s: %w", j.path, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return fmt.Errorf("integrity_check %s: %w", j.path, err)
		}
		if s != "ok" {
			problems = append(problems, s)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("integrity_check %s: %w", j.path, err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("journal %s is damaged: %s; stop the agent and move the journal aside", j.path, strings.Join(problems, "; "))
	}
	return nil
}

// SchemaVersion is the journal's applied schema version.
func (j *Journal) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	if err := j.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version of %s: %w", j.path, err)
	}
	return v, nil
}

// write runs fn in one BEGIN IMMEDIATE transaction and commits it.
func (j *Journal) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	j.wmu.Lock()
	defer j.wmu.Unlock()
	tx, err := j.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin journal transaction on %s: %w", j.path, err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit journal %s: %w", j.path, err)
	}
	return nil
}

func dsn(path string) string {
	// A file: URI, so SQLite (not the driver) parses it; escape what a URI
	// would misread in a path.
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	q := url.Values{}
	q.Set("mode", "rwc")
	q.Set("_busy_timeout", "10000")
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_foreign_keys", "1")
	q.Set("_txlock", "immediate")
	q.Set("_defensive", "1")
	return "file:" + esc + "?" + q.Encode()
}

// createJournalFile creates the journal 0600 before SQLite does (SQLite
// would use 0644 and gives -wal/-shm the main file's mode), and refuses a
// symlink or a non-regular file at the path.
func createJournalFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|oNoFollow, 0o600)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create journal %s: %w (run PrepareStateDir on its directory first)", path, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("journal %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("journal %s is not a regular file (%s): move it aside", path, fi.Mode().Type())
	}
	return nil
}

// persistWALConnector sets SQLITE_FCNTL_PERSIST_WAL on every connection:
// the agent's connections must never unlink a -wal/-shm (docs/design.md §11, safety rules), and
// the journal follows the same rule as every other database it opens.
type persistWALConnector struct{ driver.Connector }

func (c persistWALConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	fc, ok := conn.(sqlite.FileControl)
	if !ok {
		conn.Close()
		return nil, errors.New("sqlite driver connection has no file control: cannot set PERSIST_WAL")
	}
	if _, err := fc.FileControlPersistWAL("main", 1); err != nil {
		conn.Close()
		return nil, fmt.Errorf("set PERSIST_WAL: %w", err)
	}
	return conn, nil
}

func toNanos(t time.Time) int64 { return t.UnixNano() }

// nullNanos maps the zero time to NULL.
func nullNanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromNullNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromNanos(n.Int64)
}
