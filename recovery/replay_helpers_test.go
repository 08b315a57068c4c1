package recovery

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/internal/pyjson"
	"github.com/stateguard/stateguard/store"
)

// replayEnv is a real Hermes store (FTS5 tables and triggers) with a
// writable connection, and a directory for JSONL files.
type replayEnv struct {
	t   *testing.T
	db  string
	dir string
	w   *store.Writable
}

func newReplayEnv(t *testing.T) *replayEnv {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := &replayEnv{t: t, dir: dir, db: filepath.Join(dir, "state.db")}
	if err := hermestest.CreateStore(e.db); err != nil {
		t.Fatal(err)
	}
	e.open()
	return e
}

func (e *replayEnv) open() {
	e.t.Helper()
	w, err := store.OpenWritable(context.Background(), e.db)
	if err != nil {
		e.t.Fatal(err)
	}
	e.w = w
	e.t.Cleanup(func() { w.Close() })
}

// line renders a diverted JSONL line with keys in the order given.
func line(kv ...any) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i < len(kv); i += 2 {
		if i > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal(kv[i])
		v, err := json.Marshal(kv[i+1])
		if err != nil {
			panic(err)
		}
		b.Write(k)
		b.WriteString(": ")
		b.Write(v)
	}
	b.WriteByte('}')
	return b.String()
}

func msg(role, content string, ts float64) string {
	return line("role", role, "content", content, "timestamp", ts)
}

func (e *replayEnv) writeJSONL(name string, lines ...string) string {
	e.t.Helper()
	p := filepath.Join(e.dir, name)
	data := strings.Join(lines, "\n")
	if len(lines) > 0 {
		data += "\n"
	}
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

type fileStamp struct {
	sum   [32]byte
	mtime time.Time
	size  int64
}

func stamp(t *testing.T, p string) fileStamp {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fileStamp{sha256.Sum256(b), fi.ModTime(), fi.Size()}
}

// replayTwice replays p, checks the store, replays it again and checks
// that the second run appended nothing and changed no row. The JSONL must
// come through both unchanged.
func (e *replayEnv) replayTwice(p string, opts ReplayOptions) ReplayReport {
	e.t.Helper()
	before := stamp(e.t, p)
	first, err := Replay(context.Background(), e.w, p, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	sid := first.SessionID
	rows := e.rows(sid)
	e.checkStore(sid)
	second, err := Replay(context.Background(), e.w, p, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	if second.Appended != 0 || second.AlreadyPresent != second.Records {
		e.t.Fatalf("re-run appended %d (already present %d of %d)", second.Appended, second.AlreadyPresent, second.Records)
	}
	if again := e.rows(sid); !sameRows(rows, again) {
		e.t.Fatalf("re-run changed the rows:\n%v\n%v", render(rows), render(again))
	}
	if stamp(e.t, p) != before {
		e.t.Fatal("the JSONL was modified")
	}
	return first
}

func (e *replayEnv) rows(sid string) []store.Message {
	e.t.Helper()
	ms, err := store.ReadMessages(context.Background(), e.w, sid)
	if err != nil {
		e.t.Fatal(err)
	}
	return ms
}

func sameRows(a, b []store.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || renderRow(a[i]) != renderRow(b[i]) || a[i].DisplayMetadata != b[i].DisplayMetadata {
			return false
		}
	}
	return true
}

// renderRow is the part of a row the acceptance criteria name: role,
// content, timestamp, tool fields.
func renderRow(m store.Message) string {
	s := func(n sql.NullString) string {
		if !n.Valid {
			return "∅"
		}
		return n.String
	}
	r := m.Role + "|" + s(m.Content) + "|" + pyjson.FloatRepr(m.Timestamp.Float64)
	if m.ToolCallID.Valid || m.ToolName.Valid || m.ToolCalls.Valid {
		r += "|" + s(m.ToolCallID) + "|" + s(m.ToolName) + "|" + s(m.ToolCalls)
	}
	return r
}

func render(ms []store.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = renderRow(m)
	}
	return out
}

// expectRows compares rendered rows.
func (e *replayEnv) expectRows(sid string, want ...string) []store.Message {
	e.t.Helper()
	ms := e.rows(sid)
	got := render(ms)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		e.t.Fatalf("rows of %s:\n got %q\nwant %q", sid, got, want)
	}
	return ms
}

// checkStore: counters agree with the rows, and both FTS5 indexes are
// consistent with the messages table.
func (e *replayEnv) checkStore(sid string) {
	e.t.Helper()
	ctx := context.Background()
	ms := e.rows(sid)
	s, err := store.ReadSession(ctx, e.w, sid)
	if err != nil {
		e.t.Fatal(err)
	}
	calls := 0
	for i := range ms {
		calls += ms[i].ToolCallCount()
	}
	if s.MessageCount.Int64 != int64(len(ms)) || s.ToolCallCount.Int64 != int64(calls) {
		e.t.Fatalf("session %s: message_count %d tool_call_count %d, rows %d calls %d",
			sid, s.MessageCount.Int64, s.ToolCallCount.Int64, len(ms), calls)
	}
	err = e.w.InTx(ctx, func(tx *store.Tx) error {
		for _, q := range []string{
			`INSERT INTO messages_fts(messages_fts) VALUES('integrity-check')`,
			`INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES('integrity-check')`,
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// appendNormal writes a row the way a running Hermes does: no recovery id.
func (e *replayEnv) appendNormal(sid, role, content string, ts float64) {
	e.t.Helper()
	err := e.w.InTx(context.Background(), func(tx *store.Tx) error {
		if ok, err := store.SessionExists(tx.Context(), tx, sid); err != nil {
			return err
		} else if !ok {
			if err := tx.CreateSession(store.Session{ID: sid, Source: "cli"}); err != nil {
				return err
			}
		}
		_, err := tx.AppendMessage(store.Message{SessionID: sid, Role: role,
			Content:   sql.NullString{String: content, Valid: true},
			Timestamp: sql.NullFloat64{Float64: ts, Valid: true}})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// recoveryIDs are the ids Hermes would compute for p's records.
func recoveryIDs(t *testing.T, p string) []string {
	t.Helper()
	resolved, err := ResolveJSONLPath(p)
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDivertedFile(p)
	if err != nil {
		t.Fatal(err)
	}
	AssignRecoveryIDs(resolved, d.Records)
	ids := make([]string, len(d.Records))
	for i, r := range d.Records {
		ids[i] = r.RecoveryID
	}
	return ids
}

func rowID(t *testing.T, m store.Message) string {
	t.Helper()
	id, ok := rowRecoveryID(&m)
	if !ok {
		return ""
	}
	return id.Str
}
