package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// holdSnapshot opens a read transaction on path from a connection of its
// own, as a Hermes reader between two statements of one transaction: no
// checkpoint may copy frames committed after it into the main file. The
// returned func ends it.
func holdSnapshot(t *testing.T, path string) (end func()) {
	t.Helper()
	conn, err := rawDB(t, path).Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM messages").Scan(&n); err != nil {
		t.Fatal(err)
	}
	done := false
	end = func() {
		if done {
			return
		}
		done = true
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Error(err)
		}
		conn.Close()
	}
	t.Cleanup(end)
	return end
}

// mainAloneCount counts the messages of the main file alone (a copy of it
// without its -wal): what survives if the -wal is lost.
func mainAloneCount(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "main.db")
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rawDB(t, cp).QueryRow("SELECT count(*) FROM messages").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCloseRefusedCheckpoint: a reader's snapshot older than the rows a
// Writable committed keeps its final checkpoint from copying them into
// the main; Close retries, then says so (ErrCheckpointIncomplete) rather
// than closing as if the rows were checkpointed.
func TestCloseRefusedCheckpoint(t *testing.T) {
	path := newHermesStore(t)
	holdSnapshot(t, path)
	w, err := OpenWritable(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	appendOne(t, w, "s1", "replayed")
	w.closeBudget = 200 * time.Millisecond
	attempts := 0
	w.onRefused = func(int) { attempts++ }
	err = w.Close()
	if !errors.Is(err, ErrCheckpointIncomplete) {
		t.Fatalf("Close under a reader's older snapshot: %v, want ErrCheckpointIncomplete", err)
	}
	if attempts < 2 {
		t.Fatalf("the refused checkpoint was tried %d times, want retries", attempts)
	}
	if n := mainAloneCount(t, path); n != 0 {
		t.Fatalf("main alone has %d messages, want the row only in the -wal", n)
	}
	var n int
	if err := rawDB(t, path).QueryRow("SELECT count(*) FROM messages").Scan(&n); err != nil || n != 1 {
		t.Fatalf("store with its -wal: %d messages, %v; the committed row must stay readable", n, err)
	}
}

// TestCloseRetriesCheckpoint: once the reader is done, Close's retry
// copies the rows into the main and Close is clean.
func TestCloseRetriesCheckpoint(t *testing.T) {
	path := newHermesStore(t)
	end := holdSnapshot(t, path)
	w, err := OpenWritable(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	appendOne(t, w, "s1", "replayed")
	refused := 0
	w.onRefused = func(int) { refused++; end() }
	if err := w.Close(); err != nil {
		t.Fatalf("Close after the reader ended: %v", err)
	}
	if refused != 1 {
		t.Fatalf("refused %d times, want exactly the first attempt", refused)
	}
	if n := mainAloneCount(t, path); n != 1 {
		t.Fatalf("main alone has %d messages after Close, want 1", n)
	}
}

// TestCloseCheckpointHeld: a CheckpointGate that refuses is a Close error
// too, wrapping both ErrCheckpointHeld and ErrCheckpointIncomplete, and
// is not asked again (its refusal lasts as long as the other writer).
func TestCloseCheckpointHeld(t *testing.T) {
	path := newHermesStore(t)
	// An idle connection, as the agent's guard: the Writable is not the
	// last closer, whose own close-time checkpoint would ignore the gate.
	idle := rawDB(t, path)
	if err := idle.Ping(); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWritable(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	w.SetCheckpointGate(refuseGate{})
	appendOne(t, w, "s1", "replayed")
	attempts := 0
	w.onRefused = func(int) { attempts++ }
	err = w.Close()
	if attempts != 1 {
		t.Errorf("the gate was asked %d times, want once", attempts)
	}
	if !errors.Is(err, ErrCheckpointIncomplete) || !errors.Is(err, ErrCheckpointHeld) {
		t.Fatalf("Close with the gate refusing: %v", err)
	}
	if n := mainAloneCount(t, path); n != 0 {
		t.Fatalf("main alone has %d messages, want 0 (the gate refused)", n)
	}
}

type refuseGate struct{}

func (refuseGate) BeginCheckpoint() (func(), bool) { return nil, false }
