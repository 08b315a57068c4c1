package store

import (
	"context"
	"database/sql"
	"encoding/hex"
	"math"
	"testing"
)

func text(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }

// TestDisplayIdentityRule: the digest for plain text rows (hermes-compat's
// example, and -0.0 hashed as 0.0), NULL wherever the rule is not known.
func TestDisplayIdentityRule(t *testing.T) {
	base := Message{Role: "user", Content: text("hello"), Timestamp: sql.NullFloat64{Float64: 1700000000.5, Valid: true}}
	if got := hex.EncodeToString(DisplayIdentity(&base)); got != "cce4457d21ff65bbdee8107e316e66d38ca27b97d58d6fa3dab3af709ebebe2d" {
		t.Fatalf("hello: %s", got)
	}
	zero, negZero := base, base
	zero.Timestamp.Float64, negZero.Timestamp.Float64 = 0, math.Copysign(0, -1)
	if string(DisplayIdentity(&zero)) != string(DisplayIdentity(&negZero)) || DisplayIdentity(&zero) == nil {
		t.Error("-0.0 and 0.0 differ")
	}
	for name, change := range map[string]func(m *Message){
		"tool role":          func(m *Message) { m.Role = "tool" },
		"system role":        func(m *Message) { m.Role = "system" },
		"tool calls":         func(m *Message) { m.ToolCalls = text(`[{"id": "c"}]`) },
		"tool call id":       func(m *Message) { m.ToolCallID = text("c") },
		"tool name":          func(m *Message) { m.ToolName = text("grep") },
		"null content":       func(m *Message) { m.Content = sql.NullString{} },
		"compressed summary": func(m *Message) { m.CompressedSummary = sql.NullInt64{Int64: 1, Valid: true} },
		"carrier":            func(m *Message) { m.Content = text("[CONTEXT SUMMARY]: earlier\n\nask") },
		"prior context":      func(m *Message) { m.Content = text("[PRIOR CONTEXT 3 turns] ask") },
		"unicode 15":         func(m *Message) { m.Content = text("\U0001faf8") },
		"invalid utf-8":      func(m *Message) { m.Content = text("\xff") },
		"no timestamp":       func(m *Message) { m.Timestamp = sql.NullFloat64{} },
	} {
		m := base
		change(&m)
		if got := DisplayIdentity(&m); got != nil {
			t.Errorf("%s: identity %x, want NULL", name, got)
		}
	}
	// An assistant's text that mentions a summary is keyed on its content:
	// only user rows carry a live ask.
	a := base
	a.Role, a.Content = "assistant", text("the [CONTEXT SUMMARY] above")
	if DisplayIdentity(&a) == nil {
		t.Error("assistant row without an identity")
	}
}

// TestAppendBumpsCountersLikeHermes: +1 message, + the tool calls, in the
// statement Hermes uses; a row without tool calls leaves tool_call_count
// as it is, even NULL.
func TestAppendBumpsCountersLikeHermes(t *testing.T) {
	path := newHermesStore(t)
	raw := rawDB(t, path)
	if _, err := raw.Exec(`INSERT INTO sessions (id, source, started_at, tool_call_count) VALUES ('s', 'cli', 1, NULL)`); err != nil {
		t.Fatal(err)
	}
	w := openW(t, path)
	err := w.InTx(context.Background(), func(tx *Tx) error {
		ts := sql.NullFloat64{Float64: 1700000000, Valid: true}
		if _, err := tx.AppendMessage(Message{SessionID: "s", Role: "user", Content: text("a"), Timestamp: ts}); err != nil {
			return err
		}
		_, err := tx.AppendMessage(Message{SessionID: "s", Role: "assistant", ToolCalls: text(`[{"id": "1"}, {"id": "2"}]`), Timestamp: ts})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var mc int64
	var tc sql.NullInt64
	if err := raw.QueryRow(`SELECT message_count, tool_call_count FROM sessions WHERE id = 's'`).Scan(&mc, &tc); err != nil {
		t.Fatal(err)
	}
	// Hermes' NULL + 2 is NULL: the counter was never set, and it stays so.
	if mc != 2 || tc.Valid {
		t.Fatalf("message_count %d, tool_call_count %v", mc, tc)
	}
}
