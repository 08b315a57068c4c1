package hermestest

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWriterAcksEveryCommittedRow checks the writer's contract: every ack
// line is a committed row, the FTS5 triggers fired for it, and -wal/-shm
// exist while it runs.
func TestWriterAcksEveryCommittedRow(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	w := StartWriter(t, WriterOptions{DB: db, Create: true, Rate: 500, ToolEvery: 7})
	for _, suffix := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(db + suffix); err != nil {
			t.Fatalf("writer is ready but %s: %v", suffix, err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(w.Acks(t)) < 120 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d acks after 20s", len(w.Acks(t)))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	acks := w.Acks(t)

	conn, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, a := range acks {
		var n int
		if err := conn.QueryRow(`SELECT count(*) FROM messages WHERE session_id=? AND content=? AND timestamp=?`,
			a.Session, MessageContent(a.Session, a.Seq), a.Timestamp).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("ack %+v: %d rows", a, n)
		}
	}
	var rows, fts, count, tools int
	conn.QueryRow(`SELECT count(*) FROM messages`).Scan(&rows)
	conn.QueryRow(`SELECT count(*) FROM messages_fts WHERE messages_fts MATCH '"msg"'`).Scan(&fts)
	conn.QueryRow(`SELECT message_count, tool_call_count FROM sessions WHERE id='s1'`).Scan(&count, &tools)
	if count != rows || fts != len(acks) {
		t.Fatalf("rows=%d message_count=%d fts=%d acks=%d", rows, count, fts, len(acks))
	}
	if tools == 0 || rows <= len(acks) {
		t.Fatalf("tool turns not written: tools=%d rows=%d acks=%d", tools, rows, len(acks))
	}
	var ic string
	conn.QueryRow(`PRAGMA integrity_check`).Scan(&ic)
	if ic != "ok" {
		t.Fatal(ic)
	}
}

// TestWriterContinuesSeqAfterRestart: a restarted writer never reuses a seq.
func TestWriterContinuesSeqAfterRestart(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	ack := filepath.Join(dir, "ack")
	w := StartWriter(t, WriterOptions{DB: db, Create: true, Count: 5, Ack: ack})
	<-w.Done()
	w = StartWriter(t, WriterOptions{DB: db, Count: 5, Ack: ack})
	<-w.Done()
	acks := w.Acks(t)
	if len(acks) != 10 || acks[9].Seq != 10 {
		t.Fatalf("acks: %+v", acks)
	}
}
