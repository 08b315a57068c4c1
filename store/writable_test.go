package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/stateguard/stateguard/internal/hermestest"
)

func newHermesStore(t *testing.T) string {
	t.Helper()
	path := hermestest.NewStore(t)
	return path
}

func openW(t *testing.T, path string) *Writable {
	t.Helper()
	w, err := OpenWritable(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// rawDB is a plain Hermes-style connection, for setting up and checking.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", hermestest.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func appendOne(t *testing.T, w *Writable, session, content string) int64 {
	t.Helper()
	var id int64
	err := w.InTx(context.Background(), func(tx *Tx) error {
		if ok, err := SessionExists(tx.Context(), tx, session); err != nil {
			return err
		} else if !ok {
			if err := tx.CreateSession(Session{ID: session, Source: "cli"}); err != nil {
				return err
			}
		}
		var err error
		id, err = tx.AppendMessage(Message{SessionID: session, Role: "user",
			Content:   sql.NullString{String: content, Valid: true},
			Timestamp: sql.NullFloat64{Float64: 1732912345.5, Valid: true}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestWritableKeepsSidecars: closing the last connection after a write
// leaves -wal and -shm (PERSIST_WAL); the same close without it unlinks
// them, which is what the test would catch.
func TestWritableKeepsSidecars(t *testing.T) {
	path := newHermesStore(t)
	w, err := OpenWritable(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	appendOne(t, w, "s1", "kept")
	if !exists(path+"-wal") || !exists(path+"-shm") {
		t.Fatal("no -wal/-shm while open")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"-wal", "-shm"} {
		if !exists(path + s) {
			t.Fatalf("closing the writable connection removed %s", s)
		}
	}

	// Control: a connection without PERSIST_WAL, as the last closer,
	// unlinks both.
	db := rawDB(t, path)
	if _, err := db.Exec("INSERT INTO sessions(id, source, started_at) VALUES ('c', 'cli', 1)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if exists(path+"-wal") || exists(path+"-shm") {
		t.Fatal("control: an ordinary last close should unlink -wal/-shm")
	}
}

func TestOpenWritableRefuses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	t.Run("missing", func(t *testing.T) {
		p := filepath.Join(dir, "nope.db")
		if _, err := OpenWritable(ctx, p); err == nil {
			t.Fatal("opened a missing store")
		}
		if exists(p) {
			t.Fatal("created a store")
		}
	})
	t.Run("symlink", func(t *testing.T) {
		real := newHermesStore(t)
		link := filepath.Join(dir, "link.db")
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		_, err := OpenWritable(ctx, link)
		if !errors.Is(err, ErrNotRegular) {
			t.Fatalf("symlink: %v", err)
		}
	})
	t.Run("not-wal", func(t *testing.T) {
		p := filepath.Join(dir, "rollback.db")
		db, err := sql.Open("sqlite", "file:"+p+"?_pragma=journal_mode(DELETE)")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(hermestest.SchemaV30); err != nil {
			t.Fatal(err)
		}
		db.Close()
		_, err = OpenWritable(ctx, p)
		if !errors.Is(err, ErrNotWALStore) {
			t.Fatalf("rollback-journal store: %v", err)
		}
		h, _ := os.ReadFile(p)
		if h[18] != 1 || h[19] != 1 {
			t.Fatalf("journal mode changed: header bytes %d %d", h[18], h[19])
		}
	})
	t.Run("cjk", func(t *testing.T) {
		p := newHermesStore(t)
		addCJKTable(t, p)
		before, _ := os.ReadFile(p)
		_, err := OpenWritable(ctx, p)
		if !errors.Is(err, ErrNeedsTokenizer) {
			t.Fatalf("cjk store: %v", err)
		}
		after, _ := os.ReadFile(p)
		if !bytes.Equal(before, after) {
			t.Fatal("the refused store was written")
		}
		// The refusal is real: an insert fails in the trigger.
		db := rawDB(t, p)
		db.Exec("INSERT INTO sessions(id, source, started_at) VALUES ('s', 'cli', 1)")
		if _, err := db.Exec("INSERT INTO messages(session_id, role, content, timestamp) VALUES ('s', 'user', 'x', 1)"); err == nil {
			t.Fatal("control: the cjk trigger should make inserts fail without the tokenizer")
		}
	})
}

// addCJKTable gives a store a messages_fts_cjk table and trigger as Hermes
// creates them with its loadable tokenizer. The tokenizer is not built in,
// so the table is written into the schema directly, as it reads on disk.
func addCJKTable(t *testing.T, path string) {
	t.Helper()
	db := rawDB(t, path)
	stmts := []string{
		"PRAGMA writable_schema=ON",
		`INSERT INTO sqlite_master(type, name, tbl_name, rootpage, sql) VALUES ('table', 'messages_fts_cjk', 'messages_fts_cjk', 0,
			'CREATE VIRTUAL TABLE messages_fts_cjk USING fts5(content, content=''messages'', content_rowid=''id'', tokenize=''cjk_unicode61'')')`,
		"PRAGMA writable_schema=OFF",
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	db.Close()
	db = rawDB(t, path)
	if _, err := db.Exec(`CREATE TRIGGER messages_fts_cjk_insert AFTER INSERT ON messages BEGIN
		INSERT INTO messages_fts_cjk(rowid, content) VALUES (new.id, new.content); END`); err != nil {
		t.Fatal(err)
	}
	db.Close()
}

func TestInTxRollsBackOnError(t *testing.T) {
	path := newHermesStore(t)
	w := openW(t, path)
	boom := errors.New("boom")
	err := w.InTx(context.Background(), func(tx *Tx) error {
		if err := tx.CreateSession(Session{ID: "s1", Source: "cli"}); err != nil {
			return err
		}
		if _, err := tx.AppendMessage(Message{SessionID: "s1", Role: "user",
			Content: sql.NullString{String: "gone", Valid: true}, Timestamp: sql.NullFloat64{Float64: 1, Valid: true}}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if ok, err := SessionExists(context.Background(), w, "s1"); err != nil || ok {
		t.Fatalf("rolled-back session exists=%v err=%v", ok, err)
	}
}

// TestInTxBusy: BEGIN IMMEDIATE waits for another process's write lock with
// backoff, gives up after its budget, honours ctx, and succeeds once the
// lock is released.
func TestInTxBusy(t *testing.T) {
	path := newHermesStore(t)
	w := openW(t, path)
	appendOne(t, w, "s1", "first")

	locker := rawDB(t, path)
	conn, err := locker.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}

	w.retryBudget = 300 * time.Millisecond
	err = w.InTx(context.Background(), func(*Tx) error { return nil })
	if !IsBusy(err) {
		t.Fatalf("want busy after the budget, got %v", err)
	}

	w.retryBudget = busyRetryBudget
	ctx, cancel := context.WithCancel(context.Background())
	w.onBusy = func(int) { cancel() }
	err = w.InTx(ctx, func(*Tx) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want ctx error, got %v", err)
	}

	released := make(chan struct{})
	w.onBusy = func(attempt int) {
		if attempt == 1 {
			if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
				t.Error(err)
			}
			close(released)
		}
	}
	done := make(chan error, 1)
	go func() {
		done <- w.InTx(context.Background(), func(tx *Tx) error {
			_, err := tx.AppendMessage(Message{SessionID: "s1", Role: "user",
				Content: sql.NullString{String: "after wait", Valid: true}, Timestamp: sql.NullFloat64{Float64: 2, Valid: true}})
			return err
		})
	}()
	<-released
	if err := <-done; err != nil {
		t.Fatalf("after the lock was released: %v", err)
	}
	ms, err := ReadMessages(context.Background(), w, "s1")
	if err != nil || len(ms) != 2 {
		t.Fatalf("messages: %d %v", len(ms), err)
	}
}

// TestWritableWithLiveWriter: a replay-sized transaction and a Hermes-like
// writer committing as fast as it can share the store; every row of both
// lands, and the counters add up.
func TestWritableWithLiveWriter(t *testing.T) {
	path := newHermesStore(t)
	wr := hermestest.StartWriter(t, hermestest.WriterOptions{DB: path, Session: "live", ToolEvery: 5})
	w := openW(t, path)
	const jobs, per = 20, 50
	for j := 0; j < jobs; j++ {
		err := w.InTx(context.Background(), func(tx *Tx) error {
			if j == 0 {
				if err := tx.CreateSession(Session{ID: "replayed", Source: "cli"}); err != nil {
					return err
				}
			}
			for i := 0; i < per; i++ {
				if _, err := tx.AppendMessage(Message{SessionID: "replayed", Role: "user",
					Content:   sql.NullString{String: "r", Valid: true},
					Timestamp: sql.NullFloat64{Float64: float64(j*per + i), Valid: true}}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := wr.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	acks := wr.Acks(t)
	db := rawDB(t, path)
	var n, count int
	db.QueryRow("SELECT count(*) FROM messages WHERE session_id='replayed'").Scan(&n)
	db.QueryRow("SELECT message_count FROM sessions WHERE id='replayed'").Scan(&count)
	if n != jobs*per || count != n {
		t.Fatalf("replayed rows %d, message_count %d", n, count)
	}
	for _, a := range acks {
		var k int
		db.QueryRow("SELECT count(*) FROM messages WHERE session_id=? AND content=?", a.Session,
			hermestest.MessageContent(a.Session, a.Seq)).Scan(&k)
		if k != 1 {
			t.Fatalf("writer row %d: %d copies", a.Seq, k)
		}
	}
	if len(acks) == 0 {
		t.Fatal("the writer wrote nothing")
	}
}

// TestPersistWALReadBack: the driver connection really carries the flag.
func TestPersistWALReadBack(t *testing.T) {
	w := openW(t, newHermesStore(t))
	err := w.conn.Raw(func(dc any) error {
		mode, err := dc.(sqlite.FileControl).FileControlPersistWAL("main", -1)
		if err == nil && mode != 1 {
			t.Errorf("PERSIST_WAL = %d", mode)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Close checkpoints what the Writable committed, even though it is not the
// last connection (a live writer is idle beside it; the agent's guard
// would stop any last-closer checkpoint anyway): the main file alone holds
// the row, and the -wal is truncated, not removed.
func TestWritableCloseCheckpoints(t *testing.T) {
	path := newHermesStore(t)
	other := hermestest.StartWriter(t, hermestest.WriterOptions{DB: path, Session: "other", Count: 5, CheckpointEvery: -1, Linger: true})
	other.WaitAcks(t, 5)
	w, err := OpenWritable(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	appendOne(t, w, "mine", "written by the agent")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() != 0 {
		t.Fatalf("-wal after Close: %v %v, want it kept and empty", fi, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	alone := filepath.Join(t.TempDir(), "main.db")
	if err := os.WriteFile(alone, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rawDB(t, alone).QueryRow("SELECT count(*) FROM messages WHERE content = 'written by the agent'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the agent's row in the main file alone: %d %v", n, err)
	}
}
