package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

var (
	// ErrNeedsTokenizer means the store's FTS tables or triggers need the
	// cjk_unicode61 tokenizer, which this binary does not have: every
	// insert into messages would fail in a trigger.
	ErrNeedsTokenizer = errors.New("store needs the cjk_unicode61 tokenizer")

	// ErrNotWALStore means a store is not in WAL mode. stateguard never
	// changes a store's journal mode, so it does not write to such a store.
	ErrNotWALStore = errors.New("store is not in WAL mode")
)

const (
	// writeBusyTimeoutMS is SQLite's own wait per attempt, Hermes' value.
	writeBusyTimeoutMS = 1000
	// busyRetryBudget bounds all attempts at BEGIN IMMEDIATE together.
	busyRetryBudget = 30 * time.Second
)

// Writable is one writable connection to a store. It sets PERSIST_WAL, so
// closing it never unlinks -wal/-shm (it may be the last connection while
// a frozen writer still holds them), and it never changes the journal
// mode. It holds a single connection for its whole life: a pool could
// quietly open a second one without PERSIST_WAL.
//
// Methods are safe for concurrent use; transactions are serialized.
type Writable struct {
	path string
	db   *sql.DB
	conn *sql.Conn

	mu          sync.Mutex
	dirty       bool // committed since the last complete checkpoint
	gate        CheckpointGate
	retryBudget time.Duration
	closeBudget time.Duration     // Close's retries of a refused final checkpoint
	onBusy      func(attempt int) // test hook: called before each busy backoff
	onRefused   func(attempt int) // test hook: called after each refused final checkpoint
}

// OpenWritable opens the Hermes store at path for writing. It refuses a
// symlink or any non-regular file, a missing file (it never creates a
// database), a store not in WAL mode (ErrNotWALStore), and a store whose
// schema needs the cjk_unicode61 tokenizer (ErrNeedsTokenizer), all before
// anything is written.
func OpenWritable(ctx context.Context, path string) (*Writable, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open writable %s: %w", path, err)
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("open writable %s: %w (stateguard never creates a store)", abs, err)
		}
		return nil, fmt.Errorf("open writable: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("open writable %s: not followed or opened: %w", abs, ErrNotRegular)
	}
	if err := SidecarsRegular(abs); err != nil {
		return nil, fmt.Errorf("open writable %s: %w", abs, err)
	}
	db, err := OpenLive(abs, writableDSN(abs))
	if err != nil {
		return nil, fmt.Errorf("open writable %s: %w", abs, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	w := &Writable{path: abs, db: db, retryBudget: busyRetryBudget, closeBudget: closeCheckpointBudget}
	if err := w.init(ctx); err != nil {
		_ = w.Close() // nothing was written: the init error is the one to report
		return nil, Explain(abs, err)
	}
	return w, nil
}

func writableDSN(abs string) string {
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(abs)
	// mode=rw: SQLite must not create a missing file. _txlock makes every
	// transaction BEGIN IMMEDIATE, as Hermes' writers do. No
	// autocheckpoint: a commit's own checkpoint would write the main
	// behind the CheckpointGate's back; Checkpoint (and Close) do it.
	return fmt.Sprintf("file:%s?mode=rw&_txlock=immediate&_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)&_pragma=wal_autocheckpoint(0)",
		esc, writeBusyTimeoutMS)
}

func (w *Writable) init(ctx context.Context) error {
	conn, err := w.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("open writable %s: %w", w.path, err)
	}
	w.conn = conn
	// PERSIST_WAL first, before any statement can open the WAL.
	err = conn.Raw(SetPersistWAL)
	if err != nil {
		return fmt.Errorf("set PERSIST_WAL on %s: %w (refusing to write without it)", w.path, err)
	}
	// A read first, so SQLite has seen the header and a query of the
	// journal mode reports the file's mode rather than the default.
	var n int
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master").Scan(&n); err != nil {
		return fmt.Errorf("read schema of %s: %w", w.path, err)
	}
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal mode of %s: %w", w.path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("%s: journal mode is %s: %w (Hermes stores are WAL; is this the right file?)", w.path, mode, ErrNotWALStore)
	}
	if what, err := needsCJK(ctx, conn); err != nil {
		return fmt.Errorf("read schema of %s: %w", w.path, err)
	} else if what != "" {
		return fmt.Errorf("%s: %s uses cjk_unicode61: %w; appending messages would fail in its trigger. "+
			"Replay with Hermes (which loads the tokenizer), or drop that FTS table in Hermes first", w.path, what, ErrNeedsTokenizer)
	}
	return nil
}

// needsCJK names the first schema object that needs cjk_unicode61, or "".
func needsCJK(ctx context.Context, q Querier) (string, error) {
	rows, err := q.QueryContext(ctx, `SELECT type, name FROM sqlite_master
		WHERE name = 'messages_fts_cjk' OR sql LIKE '%cjk_unicode61%' ORDER BY type, name`)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	if rows.Next() {
		var typ, name string
		if err := rows.Scan(&typ, &name); err != nil {
			return "", err
		}
		return typ + " " + name, nil
	}
	return "", rows.Err()
}

// mainFile is the main database's file name as SQLite opened it.
func (w *Writable) mainFile(ctx context.Context) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn == nil {
		return "", fmt.Errorf("%s: closed", w.path)
	}
	return MainFileOf(ctx, w.conn)
}

// Path is the store's absolute path.
func (w *Writable) Path() string { return w.path }

// Checkpoint copies the WAL into the main file and truncates it
// (TruncateCheckpoint: it never waits for another connection). Every
// writer of stateguard checkpoints what it committed before it closes: the
// agent's guard keeps any connection from being the last closer that
// would, so rows the agent wrote into a store nobody else has open would
// otherwise stay only in its -wal.
func (w *Writable) Checkpoint(ctx context.Context) (Checkpoint, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn == nil {
		return Checkpoint{}, fmt.Errorf("%s: closed", w.path)
	}
	return w.checkpointLocked(ctx)
}

// CheckpointGate is asked before every checkpoint of a Writable: the
// agent's checkpoint must never write the main while a process that is no
// connection of the store has it open for writing (cp, rsync --inplace):
// its pages are the old generation's, and they would land in the new
// content. BeginCheckpoint returns ok false to skip the checkpoint (the
// rows stay in the -wal, which the incident captures), or an end func to
// call once the checkpoint is over.
type CheckpointGate interface {
	BeginCheckpoint() (end func(), ok bool)
}

// ErrCheckpointHeld is Checkpoint's error when the gate refused it.
var ErrCheckpointHeld = errors.New("checkpoint held: the main is open for writing by a process that is no connection of the store")

// SetCheckpointGate makes every later checkpoint of w (Checkpoint, Close)
// ask g first; nil asks nobody.
func (w *Writable) SetCheckpointGate(g CheckpointGate) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gate = g
}

func (w *Writable) checkpointLocked(ctx context.Context) (Checkpoint, error) {
	if w.gate != nil {
		end, ok := w.gate.BeginCheckpoint()
		if !ok {
			return Checkpoint{}, fmt.Errorf("checkpoint %s: %w", w.path, ErrCheckpointHeld)
		}
		defer end()
	}
	cp, err := TruncateCheckpoint(ctx, w.conn, writeBusyTimeoutMS)
	if err != nil {
		return cp, fmt.Errorf("checkpoint %s: %w", w.path, err)
	}
	if cp.Done {
		w.dirty = false
	}
	return cp, nil
}

// QueryContext runs a read outside any transaction; Writable is a Querier.
func (w *Writable) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn == nil {
		return nil, fmt.Errorf("%s: closed", w.path)
	}
	return w.conn.QueryContext(ctx, query, args...)
}

// InTx runs fn in one BEGIN IMMEDIATE transaction and commits, or rolls
// back when fn fails. BEGIN is retried on SQLITE_BUSY with backoff for up
// to about 30 s in all (each attempt also waits SQLite's 1 s busy timeout),
// and ctx ends the wait early.
func (w *Writable) InTx(ctx context.Context, fn func(tx *Tx) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn == nil {
		return fmt.Errorf("%s: closed", w.path)
	}
	sqlTx, err := w.begin(ctx)
	if err != nil {
		return err
	}
	tx := &Tx{ctx: ctx, tx: sqlTx, path: w.path}
	if err := fn(tx); err != nil {
		tx.closeStmts()
		if rerr := sqlTx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
			return fmt.Errorf("%w (and rollback failed: %v)", err, rerr)
		}
		return err
	}
	tx.closeStmts()
	if err := sqlTx.Commit(); err != nil {
		return fmt.Errorf("commit to %s: %w", w.path, err)
	}
	w.dirty = true
	return nil
}

func (w *Writable) begin(ctx context.Context) (*sql.Tx, error) {
	deadline := time.Now().Add(w.retryBudget)
	backoff := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		tx, err := w.conn.BeginTx(ctx, nil)
		if err == nil {
			return tx, nil
		}
		if !IsBusy(err) {
			return nil, fmt.Errorf("begin immediate on %s: %w", w.path, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("begin immediate on %s: still busy after %d attempts over %v: %w "+
				"(another process holds the write lock; retry later)", w.path, attempt, w.retryBudget, err)
		}
		if w.onBusy != nil {
			w.onBusy(attempt)
		}
		sleep := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("begin immediate on %s: %w (last: %v)", w.path, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(backoff*2, time.Second)
	}
}

// IsBusy reports whether err is SQLITE_BUSY or SQLITE_LOCKED (any extended
// code).
func IsBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code() & 0xff
		return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
	}
	return false
}

// SetPersistWAL sets and reads back PERSIST_WAL on a modernc driver
// connection (for sql.Conn.Raw), so closing it never unlinks -wal/-shm:
// every writable connection stateguard makes on a store goes through it.
func SetPersistWAL(dc any) error {
	fc, ok := dc.(sqlite.FileControl)
	if !ok {
		return errors.New("driver connection has no file control")
	}
	if _, err := fc.FileControlPersistWAL("main", 1); err != nil {
		return err
	}
	mode, err := fc.FileControlPersistWAL("main", -1)
	if err != nil {
		return err
	}
	if mode != 1 {
		return fmt.Errorf("PERSIST_WAL reads back %d", mode)
	}
	return nil
}
