package recovery

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// hermesDisplayOrderTrigger is Hermes' own display_order trigger: a row
// whose display_identity equals an earlier visible row's takes that
// row's order. The test stores' trigger only copies the id.
const hermesDisplayOrderTrigger = `
DROP TRIGGER messages_display_order;
CREATE TRIGGER messages_display_order_insert AFTER INSERT ON messages WHEN new.display_order IS NULL
BEGIN
 UPDATE messages SET display_order = COALESCE((
  SELECT display_order FROM messages WHERE session_id = new.session_id AND id <> new.id
   AND (active = 1 OR compacted = 1) AND display_identity = new.display_identity
   AND display_order IS NOT NULL ORDER BY display_order LIMIT 1
 ), new.id) WHERE id = new.id;
END;`

type columnVectors struct {
	Rows []struct {
		Line           string                     `json:"line"`
		Columns        map[string]json.RawMessage `json:"columns"`
		HermesIdentity string                     `json:"hermes_identity"`
	} `json:"rows"`
	MessageCount  int64 `json:"message_count"`
	ToolCallCount int64 `json:"tool_call_count"`
}

// TestReplayedRowsMatchHermes replays the lines of
// testdata/display-identity/vectors.json (computed with Python, see its
// README) into a store with Hermes' display_order trigger and checks
// every column of every row against what Hermes' append_message writes,
// display_identity included, then the session's counters.
func TestReplayedRowsMatchHermes(t *testing.T) {
	var v columnVectors
	if err := json.Unmarshal(readAll(t, filepath.Join("testdata", "display-identity", "vectors.json")), &v); err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	hermestest.ExecSQL(t, "file:"+db, hermesDisplayOrderTrigger)
	var lines []string
	for _, r := range v.Rows {
		lines = append(lines, r.Line)
	}
	jsonl := filepath.Join(dir, "s-cols.jsonl")
	writeFile(t, jsonl, []byte(strings.Join(lines, "\n")+"\n"))

	rep, err := ReplayFile(context.Background(), db, jsonl, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Appended != len(v.Rows) || len(rep.Issues) != 0 {
		t.Fatalf("appended %d of %d, issues %v", rep.Appended, len(v.Rows), rep.Issues)
	}
	d, err := ParseDivertedFile(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	AssignRecoveryIDs(rep.Path, d.Records)

	conn := hermestest.OpenDB(t, "file:"+db+"?mode=ro")
	rows := hermestest.QueryRows(t, conn, "SELECT * FROM messages WHERE session_id = 's-cols' ORDER BY id")
	if len(rows) != len(v.Rows) {
		t.Fatalf("%d rows in the store, want %d", len(rows), len(v.Rows))
	}
	orderOf := map[string]int64{} // identity -> display_order of its first row
	for i, want := range v.Rows {
		got := rows[i]
		for col, raw := range want.Columns {
			w := decodeTagged(t, raw, d.Records[i].RecoveryID)
			if g := got[col]; !sameColumn(g, w) {
				t.Errorf("line %d (%.40s) column %s: %s, want %s", i+1, want.Line, col, showValue(g), showValue(w))
			}
		}
		for _, col := range []string{"id", "session_id", "display_order"} {
			if _, ok := got[col]; !ok {
				t.Fatalf("no column %s", col)
			}
		}
		// Hermes' trigger: equal identities share the first one's order.
		wantOrder := got["id"].(int64)
		if ident, ok := got["display_identity"].([]byte); ok {
			if o, seen := orderOf[string(ident)]; seen {
				wantOrder = o
			} else {
				orderOf[string(ident)] = wantOrder
			}
		}
		if got["display_order"] != wantOrder {
			t.Errorf("line %d: display_order %v, want %d", i+1, got["display_order"], wantOrder)
		}
		if len(got) != len(want.Columns)+3 {
			t.Errorf("line %d: the row has %d columns, the vectors check %d+3", i+1, len(got), len(want.Columns))
		}
	}
	s := hermestest.QueryRows(t, conn, "SELECT message_count, tool_call_count FROM sessions WHERE id = 's-cols'")
	if len(s) != 1 || s[0]["message_count"] != v.MessageCount || s[0]["tool_call_count"] != v.ToolCallCount {
		t.Fatalf("session counters %v, want %d messages, %d tool calls", s, v.MessageCount, v.ToolCallCount)
	}
}

// TestReplayWithoutDisplayIdentityColumn: a store from before the
// column gets every row, and nothing fails for the missing column.
func TestReplayWithoutDisplayIdentityColumn(t *testing.T) {
	db := hermestest.NewStore(t)
	dir := filepath.Dir(db)
	hermestest.ExecSQL(t, "file:"+db, `DROP TRIGGER messages_display_order; ALTER TABLE messages DROP COLUMN display_order; ALTER TABLE messages DROP COLUMN display_identity;`)
	jsonl := filepath.Join(dir, "old.jsonl")
	writeFile(t, jsonl, []byte(msg("user", "hello", 1700000000.5)+"\n"+msg("assistant", "hi", 1700000001.5)+"\n"))
	rep, err := ReplayFile(context.Background(), db, jsonl, ReplayOptions{})
	if err != nil || rep.Appended != 2 {
		t.Fatalf("appended %d: %v", rep.Appended, err)
	}
	rows := hermestest.QueryRows(t, hermestest.OpenDB(t, "file:"+db+"?mode=ro"), "SELECT * FROM messages ORDER BY id")
	if len(rows) != 2 || rows[1]["content"] != "hi" {
		t.Fatalf("rows %v", rows)
	}
	if _, ok := rows[0]["display_identity"]; ok {
		t.Fatal("display_identity came back")
	}
}

// TestDisplayIdentitySpecExamples: hermes-compat.md's first example as a
// replayed row's column, and its second (a tool row) left NULL.
func TestDisplayIdentitySpecExamples(t *testing.T) {
	user := store.Message{Role: "user", Content: sql.NullString{String: "hello", Valid: true},
		Timestamp: sql.NullFloat64{Float64: 1700000000.5, Valid: true}}
	if got := hex.EncodeToString(store.DisplayIdentity(&user)); got != "cce4457d21ff65bbdee8107e316e66d38ca27b97d58d6fa3dab3af709ebebe2d" {
		t.Errorf("user row: %s", got)
	}
	tool := store.Message{Role: "tool", Content: sql.NullString{String: "/src/auth.py", Valid: true},
		Timestamp:  sql.NullFloat64{Float64: 1700000001.25, Valid: true},
		ToolCallID: sql.NullString{String: "call_1", Valid: true}, ToolName: sql.NullString{String: "search_files", Valid: true}}
	if got := store.DisplayIdentity(&tool); got != nil {
		t.Errorf("tool row got an identity %x; NULL is the safe value", got)
	}
}

// decodeTagged reads one tagged vector value as the driver would return
// the column: nil, string, int64, float64 or []byte.
func decodeTagged(t *testing.T, raw json.RawMessage, rid string) any {
	t.Helper()
	var v struct {
		S    *string `json:"s"`
		F    *string `json:"f"`
		I    *string `json:"i"`
		B    *string `json:"b"`
		None bool    `json:"none"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	switch {
	case v.S != nil:
		return strings.ReplaceAll(*v.S, "@RID@", rid)
	case v.F != nil:
		f, err := strconv.ParseFloat(*v.F, 64)
		if err != nil {
			t.Fatal(err)
		}
		return f
	case v.I != nil:
		n, err := strconv.ParseInt(*v.I, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	case v.B != nil:
		b, err := hex.DecodeString(*v.B)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return nil
}

func sameColumn(a, b any) bool {
	ab, aok := a.([]byte)
	bb, bok := b.([]byte)
	if aok || bok {
		return aok && bok && bytes.Equal(ab, bb)
	}
	return fmt.Sprintf("%T %v", a, a) == fmt.Sprintf("%T %v", b, b)
}

func showValue(v any) string {
	if b, ok := v.([]byte); ok {
		return "x'" + hex.EncodeToString(b) + "'"
	}
	return fmt.Sprintf("%T %q", v, fmt.Sprint(v))
}

func readAll(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
