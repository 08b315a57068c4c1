package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"reflect"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

func ns(s string) sql.NullString   { return sql.NullString{String: s, Valid: true} }
func nf(f float64) sql.NullFloat64 { return sql.NullFloat64{Float64: f, Valid: true} }
func ni(n int64) sql.NullInt64     { return sql.NullInt64{Int64: n, Valid: true} }
func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// fullMessage sets every v30 field except the ones the triggers own.
func fullMessage(session string) Message {
	return Message{
		SessionID: session, Role: "assistant", Content: ns("the answer — café ✓"),
		ToolCallID: ns("call_9"), ToolCalls: ns(`[{"id": "call_1", "type": "function"}, {"id": "call_2"}]`),
		ToolName: ns("calc"), EffectDisposition: ns("applied"), Timestamp: nf(1732912348.1234567),
		TokenCount: ni(42), FinishReason: ns("tool_calls"), Reasoning: ns("because"),
		ReasoningContent: ns("thinking"), ReasoningDetails: ns(`[{"type": "summary"}]`),
		CodexReasoningItems: ns(`[1]`), CodexMessageItems: ns(`[2]`), PlatformMessageID: ns("pm-1"),
		Observed: ni(1), CompressedSummary: ni(1), Active: ni(1), Compacted: ni(0),
		APIContent: ns("wire bytes"), DisplayKind: ns("hidden"),
		DisplayMetadata: ns(`{"k": "v", "diverted_recovery_id": "abc"}`),
		DisplayIdentity: []byte{0, 1, 2, 0xff},
	}
}

func TestAppendAndReadEveryColumn(t *testing.T) {
	ctx := context.Background()
	path := newHermesStore(t)
	w := openW(t, path)
	want := fullMessage("s1")
	var id int64
	err := w.InTx(ctx, func(tx *Tx) error {
		if err := tx.CreateSession(Session{ID: "s1", Source: "cli", Model: ns("m"), StartedAt: nf(100)}); err != nil {
			return err
		}
		var err error
		id, err = tx.AppendMessage(want)
		if err != nil {
			return err
		}
		// A plain user row: display_order comes from the trigger.
		_, err = tx.AppendMessage(Message{SessionID: "s1", Role: "user", Content: ns("hi"), Timestamp: nf(1)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := ReadMessages(ctx, w, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].ID != id || ms[1].ID <= id {
		t.Fatalf("rows: %+v", ms)
	}
	got := ms[0]
	want.ID = id
	want.DisplayOrder = ni(id) // the display_order trigger fired
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if ms[1].DisplayOrder != ni(ms[1].ID) || ms[1].Observed != ni(0) || ms[1].Active != ni(1) {
		t.Fatalf("defaults: %+v", ms[1])
	}

	s, err := ReadSession(ctx, w, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if s.MessageCount != ni(2) || s.ToolCallCount != ni(2) || s.Model != ns("m") || s.StartedAt != nf(100) || s.Archived != ni(0) {
		t.Fatalf("session: %+v", s)
	}
	if _, err := ReadSession(ctx, w, "nope"); !errors.Is(err, ErrNoSession) {
		t.Fatalf("missing session: %v", err)
	}

	// FTS5 saw the rows, through their triggers.
	db := rawDB(t, path)
	var fts, tri int
	db.QueryRow(`SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'calc'`).Scan(&fts)
	db.QueryRow(`SELECT count(*) FROM messages_fts_trigram WHERE messages_fts_trigram MATCH 'café'`).Scan(&tri)
	if fts != 1 || tri != 1 {
		t.Fatalf("fts %d trigram %d", fts, tri)
	}
	mustExec(t, db, `INSERT INTO messages_fts(messages_fts) VALUES('integrity-check')`)
}

func TestToolCallCount(t *testing.T) {
	for in, want := range map[string]int{
		"": 0, "null": 0, "[]": 0, `[{"id": 1}, {"id": 2}, 3]`: 3, `{"id": 1}`: 1, "not json": 0,
	} {
		m := Message{ToolCalls: ns(in)}
		if got := m.ToolCallCount(); got != want {
			t.Errorf("%q: %d, want %d", in, got, want)
		}
	}
}

// TestSchemaProbedNotAssumed: v31 columns append on a v31 store and are an
// error on a v30 one; unknown columns travel in Extra.
func TestSchemaProbedNotAssumed(t *testing.T) {
	ctx := context.Background()
	v30 := newHermesStore(t)
	v31 := newHermesStore(t)
	db := rawDB(t, v31)
	mustExec(t, db, hermestest.SchemaV31Extra)
	mustExec(t, db, "ALTER TABLE messages ADD COLUMN future_col TEXT")
	db.Close()

	m := Message{SessionID: "s", Role: "user", Content: ns("uid"), Timestamp: nf(5),
		MessageUID: ns("u-1"), ToolCallUIDs: ns(`["t"]`), Extra: map[string]any{"future_col": "f"}}
	for _, tc := range []struct {
		path string
		ok   bool
	}{{v30, false}, {v31, true}} {
		w := openW(t, tc.path)
		err := w.InTx(ctx, func(tx *Tx) error {
			if err := tx.CreateSession(Session{ID: "s", Source: "cli", AutoArchived: func() sql.NullInt64 {
				if tc.ok {
					return ni(0)
				}
				return sql.NullInt64{}
			}()}); err != nil {
				return err
			}
			_, err := tx.AppendMessage(m)
			return err
		})
		if (err == nil) != tc.ok {
			t.Fatalf("%s: ok=%v err=%v", tc.path, tc.ok, err)
		}
		if !tc.ok {
			continue
		}
		ms, err := ReadMessages(ctx, w, "s")
		if err != nil || len(ms) != 1 {
			t.Fatal(err)
		}
		if ms[0].MessageUID != ns("u-1") || ms[0].ToolCallUIDs != ns(`["t"]`) || ms[0].Extra["future_col"] != "f" {
			t.Fatalf("v31 row: %+v", ms[0])
		}
		s, err := ReadSession(ctx, w, "s")
		if err != nil || s.AutoArchived != ni(0) {
			t.Fatalf("v31 session: %+v %v", s, err)
		}
	}
}

func TestAppendNeedsSession(t *testing.T) {
	w := openW(t, newHermesStore(t))
	err := w.InTx(context.Background(), func(tx *Tx) error {
		_, err := tx.AppendMessage(Message{SessionID: "ghost", Role: "user", Content: ns("x"), Timestamp: nf(1)})
		return err
	})
	if err == nil {
		t.Fatal("appended into a missing session")
	}
}

// TestLookupsChunked: 40 000 ids are more bound variables than SQLite
// allows in one statement (32 766), so this only works in chunks.
func TestLookupsChunked(t *testing.T) {
	ctx := context.Background()
	w := openW(t, newHermesStore(t))
	var ids []int64
	err := w.InTx(ctx, func(tx *Tx) error {
		if err := tx.CreateSession(Session{ID: "s", Source: "cli"}); err != nil {
			return err
		}
		for i := 0; i < 2100; i++ {
			id, err := tx.AppendMessage(Message{SessionID: "s", Role: "user", Content: ns("x"), Timestamp: nf(float64(i))})
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var query []int64
	for i := int64(40000); i > 0; i-- { // descending: results must still come in id order
		query = append(query, i)
	}
	ms, err := ReadMessagesByID(ctx, w, query)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != len(ids) {
		t.Fatalf("got %d rows, want %d", len(ms), len(ids))
	}
	for i := range ms {
		if ms[i].ID != ids[i] {
			t.Fatalf("row %d: id %d, want %d", i, ms[i].ID, ids[i])
		}
	}
	found, err := ExistingMessageIDs(ctx, w, query)
	if err != nil || len(found) != len(ids) || !found[ids[0]] || found[39999] {
		t.Fatalf("existing: %d %v", len(found), err)
	}
	var direct []any
	for _, id := range query {
		direct = append(direct, id)
	}
	if _, err := w.QueryContext(ctx, "SELECT id FROM messages WHERE id IN ("+placeholders(len(direct))+")", direct...); err == nil {
		t.Log("this SQLite accepts 40 000 variables; the chunking is still exercised")
	}
}

func TestReadLenientTypes(t *testing.T) {
	ctx := context.Background()
	path := newHermesStore(t)
	db := rawDB(t, path)
	mustExec(t, db, "INSERT INTO sessions(id, source, started_at) VALUES ('s', 'cli', '12.5')")
	// SQLite's REAL affinity turns '12.5' into a number; a non-numeric text
	// stays text, as in a damaged row.
	mustExec(t, db, "INSERT INTO messages(session_id, role, content, timestamp, display_identity) VALUES ('s', 'user', 42, 7, 'blob as text')")
	db.Close()
	w := openW(t, path)
	ms, err := ReadMessages(ctx, w, "s")
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].Content != ns("42") || ms[0].Timestamp != nf(7) || !bytes.Equal(ms[0].DisplayIdentity, []byte("blob as text")) {
		t.Fatalf("%+v", ms[0])
	}
	s, err := ReadSession(ctx, w, "s")
	if err != nil || s.StartedAt != nf(12.5) {
		t.Fatalf("%+v %v", s, err)
	}
}
