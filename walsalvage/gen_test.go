package walsalvage

import (
	"database/sql"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// The golden inputs are real WAL files: written by the test writer
// process, or by modernc SQLite on the Hermes schema of internal/hermestest,
// at SQLite's default page size of 4096. A few cases are a real WAL cut or
// re-encoded the way a crash or another machine would leave it. `go test
// ./walsalvage/ -run TestGolden -update` writes them again (timestamps
// change, so do the wants).

// goldenInput is one case's files: the WAL, a main to pass as
// Options.Main (nil: none), and the message rows the writer was told were
// committed and that the salvage must give back exactly.
type goldenInput struct {
	wal, main []byte
	acks      []ackRow
	// selfContained: every page of the database is in the WAL, so SQLite
	// itself can read it (over a zeroed main) as an oracle.
	selfContained bool
}

// ackRow is one acknowledged message, as acks.tsv lists it.
type ackRow struct {
	ID        int64
	Session   string
	Timestamp float64
	Content   string
}

func makeGoldenInputs(t *testing.T) map[string]goldenInput {
	writerWAL, acks := writerCase(t)
	out := map[string]goldenInput{
		"main-gone":        {wal: writerWAL, acks: acks, selfContained: true},
		"torn-last-frame":  {wal: writerWAL[:len(writerWAL)-1000], acks: acks[:len(acks)-1], selfContained: true},
		"uncommitted-tail": {wal: dropLastCommit(t, writerWAL), acks: acks[:len(acks)-1], selfContained: true},
		"big-endian":       {wal: reencodeBigEndian(t, writerWAL), acks: acks, selfContained: true},
	}
	out["overflow"] = overflowCase(t)
	out["overflow-missing"] = overflowMissingCase(t)
	out["old-salt"] = oldSaltCase(t)
	out["v31-mismatched-main"] = v31Case(t)
	out["freed-pages"] = freedPagesCase(t)
	return out
}

// writerCase runs the test writer on a new store with checkpoints off,
// so every page, schema included, is in the WAL; kills it (no close-time
// checkpoint) and returns the WAL and what it acknowledged. The main is
// then gone: the WAL is all there is.
func writerCase(t *testing.T) ([]byte, []ackRow) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, Count: 4, Linger: true, CheckpointEvery: -1})
	deadline := time.Now().Add(30 * time.Second)
	for len(w.Acks(t)) < 4 {
		if time.Now().After(deadline) {
			t.Fatal("writer did not acknowledge 4 rows in 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.Kill()
	<-w.Done()
	wal := readFile(t, db+"-wal")
	var acks []ackRow
	for _, a := range w.Acks(t) {
		acks = append(acks, ackRow{ID: a.ID, Session: a.Session, Timestamp: a.Timestamp, Content: hermestest.MessageContent(a.Session, a.Seq)})
	}
	return wal, acks
}

// sqliteStore is a Hermes store written directly, one commit per call,
// with automatic checkpoints off, so the test decides what the WAL holds.
type sqliteStore struct {
	t    *testing.T
	path string
	db   *sql.DB
	acks []ackRow
}

// newSQLiteStore makes a store and opens it. fresh: the schema is
// created through this connection, so it is in the WAL too; else the store
// is made and closed first, so the schema is only in the main.
func newSQLiteStore(t *testing.T, v31, fresh bool) *sqliteStore {
	path := filepath.Join(t.TempDir(), "state.db")
	if !fresh {
		if err := hermestest.CreateStore(path); err != nil {
			t.Fatal(err)
		}
	}
	db := hermestest.OpenNoCheckpoint(t, path)
	s := &sqliteStore{t: t, path: path, db: db}
	if fresh {
		if err := hermestest.InitSchema(db); err != nil {
			t.Fatal(err)
		}
	}
	if v31 {
		s.exec(hermestest.SchemaV31Extra)
	}
	s.exec(`INSERT INTO sessions (id, source, model, started_at) VALUES ('s1', 'cli', 'm', 1700000000.25)`)
	return s
}

func (s *sqliteStore) exec(q string, args ...any) {
	s.t.Helper()
	if _, err := s.db.Exec(q, args...); err != nil {
		s.t.Fatalf("%s: %v", q, err)
	}
}

// message commits one user message and records it as acknowledged.
func (s *sqliteStore) message(content string, ts float64) {
	s.t.Helper()
	res, err := s.db.Exec(`INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s1', 'user', ?, ?)`, content, ts)
	if err != nil {
		s.t.Fatal(err)
	}
	id, _ := res.LastInsertId()
	s.acks = append(s.acks, ackRow{ID: id, Session: "s1", Timestamp: ts, Content: content})
}

// checkpoint moves everything into the main; the next write starts the
// WAL over with new salts.
func (s *sqliteStore) checkpoint() {
	s.t.Helper()
	var busy, logged, done int
	if err := s.db.QueryRow("PRAGMA wal_checkpoint(RESTART)").Scan(&busy, &logged, &done); err != nil || busy != 0 {
		s.t.Fatalf("checkpoint: busy %d, %v", busy, err)
	}
	s.acks = nil
}

// wal is the WAL as it is now, with the connection still open (a clean
// close would checkpoint it away).
func (s *sqliteStore) wal() []byte { return readFile(s.t, s.path+"-wal") }

// bigContent is longer than a page, so its record spills into overflow
// pages: 10000 bytes need two more 4092-byte pages after the local part.
func bigContent() string {
	var b strings.Builder
	for i := 0; b.Len() < 10000; i++ {
		fmt.Fprintf(&b, "line %04d of a long tool transcript; ", i)
	}
	return b.String()[:10000]
}

func overflowCase(t *testing.T) goldenInput {
	s := newSQLiteStore(t, false, false)
	s.message("before the long one", 1700000001.5)
	s.message(bigContent(), 1700000002.75)
	s.message("after the long one", 1700000003.0)
	return goldenInput{wal: s.wal(), acks: s.acks}
}

// overflowMissingCase: the long row and its overflow pages are
// checkpointed into the main; a later row rewrites the leaf page the long
// row's cell is on, so the WAL has the leaf but not the overflow pages.
// The WAL ends after the new generation's frames, as journal_size_limit
// leaves it: the previous generation's frames, which still hold the
// overflow pages, are cut away (prevGenCase reads them).
func overflowMissingCase(t *testing.T) goldenInput {
	s := newSQLiteStore(t, false, false)
	s.message(bigContent(), 1700000002.75)
	s.checkpoint()
	s.message("written after the checkpoint", 1700000004.5)
	wal := s.wal()
	w := mustReadWAL(t, wal)
	end := w.Frames[len(w.Frames)-1].Offset + int64(w.PageSize())
	return goldenInput{wal: wal[:end], acks: s.acks}
}

// oldSaltCase: eight rows, a checkpoint, then the eight are deleted and
// two more written: the WAL restarts from its start with new salts, and
// the old frames after the new ones are left in the file, with images of
// the leaf page that still hold the eight. Only the new salts count, so
// only the two come back.
func oldSaltCase(t *testing.T) goldenInput {
	s := newSQLiteStore(t, false, false)
	for i := range 8 {
		s.message(fmt.Sprintf("old generation %d", i), 1700000010+float64(i))
	}
	s.checkpoint()
	s.exec(`DELETE FROM messages`)
	s.message("new generation 0", 1700000100.5)
	s.message("new generation 1", 1700000101.5)
	return goldenInput{wal: s.wal(), acks: s.acks}
}

// v31Case: a v31 store's WAL (four more columns per message) with a v30
// store passed as the main, as when the main at the path is a restored
// backup from before the upgrade. The main's layout is tried and refused
// by the records' field count; the built-in v31 layout reads them.
func v31Case(t *testing.T) goldenInput {
	s := newSQLiteStore(t, true, false)
	s.checkpoint()
	res, err := s.db.Exec(`INSERT INTO messages (session_id, role, content, timestamp, message_uid, tool_call_uids)
		VALUES ('s1', 'assistant', 'v31 row', 1700000200.125, 'uid-1', '[]')`)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := res.LastInsertId()
	s.acks = append(s.acks, ackRow{ID: id, Session: "s1", Timestamp: 1700000200.125, Content: "v31 row"})
	s.exec(`UPDATE sessions SET auto_archived = 1, message_count = 1 WHERE id = 's1'`)
	backup := filepath.Join(t.TempDir(), "backup.db")
	if err := hermestest.CreateStore(backup); err != nil {
		t.Fatal(err)
	}
	return goldenInput{wal: s.wal(), main: readFile(t, backup), acks: s.acks}
}

// freedPagesCase: sixty rows (one transaction) spread over several leaf
// pages, then all but the last two deleted. The emptied leaf pages go to
// the freelist without being written again, so their newest image in the
// WAL still holds deleted rows; the freelist (page 1 is in the WAL) tells
// them apart.
func freedPagesCase(t *testing.T) goldenInput {
	s := newSQLiteStore(t, false, true)
	s.exec("BEGIN")
	for i := range 60 {
		s.message(fmt.Sprintf("row %02d %s", i, strings.Repeat("x", 200)), 1700000300+float64(i))
	}
	s.exec("COMMIT")
	s.exec(`DELETE FROM messages WHERE id <= 58`)
	s.acks = s.acks[58:]
	return goldenInput{wal: s.wal(), acks: s.acks, selfContained: true}
}

// dropLastCommit cuts the WAL just before its last frame, the commit
// frame of the last transaction: what is left of that transaction is a
// valid but uncommitted tail.
func dropLastCommit(t *testing.T, wal []byte) []byte {
	w := mustReadWAL(t, wal)
	if w.Committed != len(w.Frames) || w.Committed < 2 {
		t.Fatalf("writer WAL: %d frames, %d committed", len(w.Frames), w.Committed)
	}
	last := w.Frames[len(w.Frames)-1]
	if w.Frames[len(w.Frames)-2].CommitSize != 0 {
		t.Fatal("the last transaction has a single frame; nothing would be left uncommitted")
	}
	return wal[:last.Offset-store.WALFrameHeaderSize]
}

// reencodeBigEndian rewrites a WAL as a big-endian machine writes it:
// magic 0x377f0683 and every checksum over big-endian words.
func reencodeBigEndian(t *testing.T, wal []byte) []byte {
	w := mustReadWAL(t, wal)
	out := append([]byte{}, wal...)
	be := binary.BigEndian
	be.PutUint32(out[0:], store.WALMagicBE)
	s1, s2 := store.WALChecksum(true, 0, 0, out[:24])
	be.PutUint32(out[24:], s1)
	be.PutUint32(out[28:], s2)
	for _, f := range w.Frames {
		h := out[f.Offset-store.WALFrameHeaderSize : f.Offset]
		s1, s2 = store.WALChecksum(true, s1, s2, h[:8])
		s1, s2 = store.WALChecksum(true, s1, s2, out[f.Offset:f.Offset+int64(w.PageSize())])
		be.PutUint32(h[16:], s1)
		be.PutUint32(h[20:], s2)
	}
	return out
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
