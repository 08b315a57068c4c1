package recovery

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// Acceptance 1: A,B replayed; C,D written normally; replaying again leaves
// [A,B,C,D].
func TestReplayAfterSessionWentOn(t *testing.T) {
	e := newReplayEnv(t)
	p := e.writeJSONL("s1.jsonl", msg("user", "A", 10), msg("assistant", "B", 11))
	rep := e.replayTwice(p, ReplayOptions{})
	if !rep.SessionCreated || rep.Appended != 2 || rep.SessionID != "s1" {
		t.Fatalf("first replay: %+v", rep)
	}
	e.appendNormal("s1", "user", "C", 12)
	e.appendNormal("s1", "assistant", "D", 13)
	e.replayTwice(p, ReplayOptions{})
	ms := e.expectRows("s1", "user|A|10.0", "assistant|B|11.0", "user|C|12.0", "assistant|D|13.0")
	ids := recoveryIDs(t, p)
	for i, want := range []string{ids[0], ids[1], "", ""} {
		if got := rowID(t, ms[i]); got != want {
			t.Fatalf("row %d recovery id %q, want %q", i, got, want)
		}
	}
	e.checkStore("s1")
	s, _ := store.ReadSession(context.Background(), e.w, "s1")
	if s.Source != "cli" {
		t.Fatalf("created session source %q", s.Source)
	}
}

// Acceptance 2: an assistant row with null content and tool calls, and the
// tool result with its tool_call_id, keep their pairing.
func TestReplayToolPairing(t *testing.T) {
	e := newReplayEnv(t)
	calls := []any{map[string]any{"id": "call_1", "type": "function",
		"function": map[string]any{"name": "calc", "arguments": `{"x": 6}`}}}
	p := e.writeJSONL("tools.jsonl",
		msg("user", "what is 6*7", 1),
		line("role", "assistant", "content", nil, "tool_calls", calls, "timestamp", 2.5, "finish_reason", "tool_calls"),
		line("role", "tool", "content", "42", "tool_call_id", "call_1", "tool_name", "calc", "timestamp", 3),
		msg("assistant", "42", 4),
	)
	e.replayTwice(p, ReplayOptions{})
	ms := e.expectRows("tools",
		"user|what is 6*7|1.0",
		`assistant|∅|2.5|∅|∅|[{"function": {"arguments": "{\"x\": 6}", "name": "calc"}, "id": "call_1", "type": "function"}]`,
		"tool|42|3.0|call_1|calc|∅",
		"assistant|42|4.0")
	if ms[1].FinishReason.String != "tool_calls" {
		t.Fatalf("finish_reason %+v", ms[1].FinishReason)
	}
	e.checkStore("tools")
}

// Acceptance 3: into an empty destination, another session id, and a fresh
// database: all rows.
func TestReplayIntoEmptyOtherAndFresh(t *testing.T) {
	e := newReplayEnv(t)
	p := e.writeJSONL("s1.jsonl", msg("user", "A", 1), msg("assistant", "B", 2), msg("user", "C", 3))
	want := []string{"user|A|1.0", "assistant|B|2.0", "user|C|3.0"}
	e.replayTwice(p, ReplayOptions{})
	e.expectRows("s1", want...)

	rep := e.replayTwice(p, ReplayOptions{SessionID: "other"})
	if rep.SessionID != "other" || rep.Appended != 3 {
		t.Fatalf("other session: %+v", rep)
	}
	e.expectRows("other", want...)
	e.expectRows("s1", want...)
	e.checkStore("other")

	// The session exists but is empty.
	e.appendNormal("empty", "system", "placeholder", 0)
	if err := e.w.InTx(context.Background(), func(tx *store.Tx) error {
		_, err := tx.ExecContext(tx.Context(), "DELETE FROM messages WHERE session_id = 'empty'")
		if err == nil {
			_, err = tx.ExecContext(tx.Context(), "UPDATE sessions SET message_count = 0 WHERE id = 'empty'")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rep = e.replayTwice(p, ReplayOptions{SessionID: "empty"})
	if rep.SessionCreated || rep.Appended != 3 {
		t.Fatalf("empty session: %+v", rep)
	}

	fresh := newReplayEnv(t)
	rep = fresh.replayTwice(p, ReplayOptions{})
	if rep.Appended != 3 {
		t.Fatalf("fresh database: %+v", rep)
	}
	fresh.expectRows("s1", want...)
}

// Acceptance 4: a failure in the middle of a job appends nothing; a retry
// appends everything once. Also when an earlier Hermes-style run (one
// commit per row) died half way.
func TestReplayFailureMidJobAndRetry(t *testing.T) {
	e := newReplayEnv(t)
	var lines []string
	for i := 1; i <= 6; i++ {
		lines = append(lines, msg("user", "row "+itoa(i), float64(i)))
	}
	p := e.writeJSONL("s1.jsonl", lines...)
	inject := func() {
		err := e.w.InTx(context.Background(), func(tx *store.Tx) error {
			_, err := tx.ExecContext(tx.Context(), `CREATE TRIGGER inject BEFORE INSERT ON messages
				WHEN new.content = 'row 4' BEGIN SELECT RAISE(ABORT, 'injected failure'); END`)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	heal := func() {
		err := e.w.InTx(context.Background(), func(tx *store.Tx) error {
			_, err := tx.ExecContext(tx.Context(), `DROP TRIGGER inject`)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	inject()
	_, err := Replay(context.Background(), e.w, p, ReplayOptions{})
	if err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("want the injected failure, got %v", err)
	}
	if ok, _ := store.SessionExists(context.Background(), e.w, "s1"); ok {
		t.Fatal("a failed job left its session behind")
	}
	heal()
	e.replayTwice(p, ReplayOptions{})
	var want []string
	for i := 1; i <= 6; i++ {
		want = append(want, "user|row "+itoa(i)+"|"+itoa(i)+".0")
	}
	e.expectRows("s1", want...)

	// A Hermes-style run (one commit per row) that died after three rows
	// left the file's first three records, with their recovery ids; the
	// replay finds them and appends only the rest. The same path with only
	// those lines gives those ids: they chain from the path and the
	// records before.
	part := e.writeJSONL("perrow.jsonl", lines[:3]...)
	if rep, err := Replay(context.Background(), e.w, part, ReplayOptions{}); err != nil || rep.Appended != 3 {
		t.Fatalf("the first three rows: %+v %v", rep, err)
	}
	e.writeJSONL("perrow.jsonl", lines...)
	rep := e.replayTwice(part, ReplayOptions{})
	if rep.AlreadyPresent != 3 || rep.Appended != 3 {
		t.Fatalf("replay after a per-row run died half way: %+v", rep)
	}
	e.expectRows("perrow", want...)
	e.checkStore("perrow")
}

// Acceptance 5: [A,B] C,D [E,F], replayed again, is unchanged: as one file
// that grew, and as two files.
func TestReplayBatchesSeparatedByConversation(t *testing.T) {
	e := newReplayEnv(t)
	p := e.writeJSONL("s1.jsonl", msg("user", "A", 1), msg("assistant", "B", 2))
	e.replayTwice(p, ReplayOptions{})
	e.appendNormal("s1", "user", "C", 3)
	e.appendNormal("s1", "assistant", "D", 4)
	p = e.writeJSONL("s1.jsonl", msg("user", "A", 1), msg("assistant", "B", 2), msg("user", "E", 5), msg("assistant", "F", 6))
	rep := e.replayTwice(p, ReplayOptions{})
	if rep.AlreadyPresent != 2 || rep.Appended != 2 {
		t.Fatalf("grown file: %+v", rep)
	}
	want := []string{"user|A|1.0", "assistant|B|2.0", "user|C|3.0", "assistant|D|4.0", "user|E|5.0", "assistant|F|6.0"}
	e.expectRows("s1", want...)

	// Two files into one session.
	p1 := e.writeJSONL("one.jsonl", msg("user", "A", 1), msg("assistant", "B", 2))
	p2 := e.writeJSONL("two.jsonl", msg("user", "E", 5), msg("assistant", "F", 6))
	e.replayTwice(p1, ReplayOptions{SessionID: "two-files"})
	e.appendNormal("two-files", "user", "C", 3)
	e.appendNormal("two-files", "assistant", "D", 4)
	e.replayTwice(p2, ReplayOptions{SessionID: "two-files"})
	e.replayTwice(p1, ReplayOptions{SessionID: "two-files"})
	e.replayTwice(p2, ReplayOptions{SessionID: "two-files"})
	e.expectRows("two-files", want...)
	e.checkStore("two-files")
}

// Acceptance 6: a new turn with an old turn's content but a new timestamp
// is appended; the same content and timestamp is a legacy match.
func TestReplaySameContentNewTimestamp(t *testing.T) {
	e := newReplayEnv(t)
	e.appendNormal("s1", "user", "hello", 100)
	p := e.writeJSONL("s1.jsonl", msg("user", "hello", 200))
	rep := e.replayTwice(p, ReplayOptions{})
	if rep.Appended != 1 {
		t.Fatalf("%+v", rep)
	}
	e.expectRows("s1", "user|hello|100.0", "user|hello|200.0")

	legacy := e.writeJSONL("legacy.jsonl", msg("user", "hello", 100), msg("user", "hello", 300))
	rep = e.replayTwice(legacy, ReplayOptions{SessionID: "s1"})
	if rep.AlreadyPresent != 1 || rep.Appended != 1 {
		t.Fatalf("legacy match: %+v", rep)
	}
	e.expectRows("s1", "user|hello|100.0", "user|hello|200.0", "user|hello|300.0")
}

// Acceptance 7: a destination in reverse order is not a match (forward
// only).
func TestReplayForwardOnly(t *testing.T) {
	e := newReplayEnv(t)
	e.appendNormal("s1", "assistant", "B", 2)
	e.appendNormal("s1", "user", "A", 1)
	p := e.writeJSONL("s1.jsonl", msg("user", "A", 1), msg("assistant", "B", 2))
	rep := e.replayTwice(p, ReplayOptions{})
	if rep.AlreadyPresent != 1 || rep.Appended != 1 {
		t.Fatalf("%+v", rep)
	}
	e.expectRows("s1", "assistant|B|2.0", "user|A|1.0", "assistant|B|2.0")
}

// Acceptance 8: a record without a timestamp never matches a legacy row by
// content; it gets the time of the replay.
func TestReplayNoTimestampNeverLegacyMatch(t *testing.T) {
	e := newReplayEnv(t)
	e.appendNormal("s1", "user", "hello", 100)
	p := e.writeJSONL("s1.jsonl",
		line("role", "user", "content", "hello"),
		line("role", "user", "content", "hello", "timestamp", nil),
		line("role", "user", "content", "hello", "timestamp", "not a number"))
	rep := e.replayTwice(p, ReplayOptions{})
	if rep.AlreadyPresent != 0 || rep.Appended != 3 {
		t.Fatalf("%+v", rep)
	}
	ms := e.rows("s1")
	if len(ms) != 4 {
		t.Fatalf("%d rows", len(ms))
	}
	for _, m := range ms[1:] {
		if m.Timestamp.Float64 < 1.7e9 || m.Content.String != "hello" {
			t.Fatalf("row without a usable timestamp: %+v", m)
		}
	}
}

// Acceptance 9: display fields, metadata (merged with the recovery id),
// platform_message_id, api_content and the reasoning fields survive, stored
// the way Hermes stores them.
func TestReplayDurableFields(t *testing.T) {
	e := newReplayEnv(t)
	p := e.writeJSONL("s1.jsonl",
		line("role", "assistant", "content", "shown", "tool_name", nil, "tool_calls", nil, "tool_call_id", nil,
			"finish_reason", "stop", "reasoning", "because", "reasoning_content", "thought",
			"reasoning_details", []any{map[string]any{"type": "summary", "text": "é"}},
			"codex_reasoning_items", []any{}, "codex_message_items", "raw text",
			"_compressed_summary", true, "timestamp", 5.5, "api_content", "wire bytes",
			"display_kind", "hidden", "display_metadata", map[string]any{"k": "vé"}, "platform_message_id", "pm-1"),
		line("role", "user", "content", "string metadata", "timestamp", 6,
			"display_metadata", `{"z": 1, "a": [true]}`, "api_content", 5, "display_kind", nil),
		line("role", "user", "content", "list metadata", "timestamp", 7, "display_metadata", []any{1}),
		line("role", "user", "content", "bad metadata", "timestamp", 8, "display_metadata", "{not json", "platform_message_id", ""),
	)
	e.replayTwice(p, ReplayOptions{})
	ms := e.rows("s1")
	ids := recoveryIDs(t, p)
	m := ms[0]
	check := func(name string, got sql.NullString, want string, valid bool) {
		t.Helper()
		if got.Valid != valid || got.String != want {
			t.Errorf("%s: %+v, want %q (valid %v)", name, got, want, valid)
		}
	}
	check("finish_reason", m.FinishReason, "stop", true)
	check("reasoning", m.Reasoning, "because", true)
	check("reasoning_content", m.ReasoningContent, "thought", true)
	check("reasoning_details", m.ReasoningDetails, `[{"text": "\u00e9", "type": "summary"}]`, true) // json.Marshal wrote the keys sorted
	check("codex_reasoning_items", m.CodexReasoningItems, "", false)
	check("codex_message_items", m.CodexMessageItems, "raw text", true)
	check("api_content", m.APIContent, "wire bytes", true)
	check("display_kind", m.DisplayKind, "hidden", true)
	check("platform_message_id", m.PlatformMessageID, "pm-1", true)
	check("display_metadata", m.DisplayMetadata, `{"k": "v\u00e9", "diverted_recovery_id": "`+ids[0]+`"}`, true)
	if m.CompressedSummary.Int64 != 1 || m.Active.Int64 != 1 || m.Observed.Int64 != 0 {
		t.Errorf("flags: %+v %+v %+v", m.CompressedSummary, m.Active, m.Observed)
	}
	check("string metadata", ms[1].DisplayMetadata, `{"z": 1, "a": [true], "diverted_recovery_id": "`+ids[1]+`"}`, true)
	check("api_content not a str", ms[1].APIContent, "", false)
	check("display_kind null", ms[1].DisplayKind, "", false)
	check("list metadata", ms[2].DisplayMetadata, `{"diverted_recovery_id": "`+ids[2]+`"}`, true)
	check("bad metadata", ms[3].DisplayMetadata, `{"diverted_recovery_id": "`+ids[3]+`"}`, true)
	check("empty platform_message_id", ms[3].PlatformMessageID, "", false)
	e.checkStore("s1")
}

// Acceptance 10: inspecting writes nothing; without a store it opens no
// database; with one it reads it without creating -wal/-shm.
func TestInspectWritesNothing(t *testing.T) {
	e := newReplayEnv(t)
	p := e.writeJSONL("s1.jsonl", msg("user", "A", 1), msg("assistant", "B", 2), "garbage", msg("user", "C", 3))
	half := e.writeJSONL("half.jsonl", msg("user", "A", 1), msg("assistant", "B", 2))
	e.replayTwice(half, ReplayOptions{SessionID: "s1"})
	e.w.Close()
	for _, s := range []string{"-wal", "-shm"} {
		if err := os.Remove(e.db + s); err != nil {
			t.Fatal(err)
		}
	}
	jsonl := stamp(t, p)
	db := stamp(t, e.db)

	rep, err := Inspect(context.Background(), p, "", ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lines != 4 || rep.Records != 3 || len(rep.Issues) != 1 || rep.WouldAppend != -1 || rep.Store != "" {
		t.Fatalf("no store: %+v", rep)
	}

	rep, err = Inspect(context.Background(), p, e.db, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A and B carry half.jsonl's recovery ids, so against s1.jsonl they
	// are proof of other records: nothing of s1.jsonl is present yet.
	if rep.WouldAppend != 3 || !rep.SessionExists || rep.Store != e.db {
		t.Fatalf("closed store: %+v", rep)
	}
	for _, s := range []string{"-wal", "-shm", "-journal"} {
		if _, err := os.Lstat(e.db + s); err == nil {
			t.Fatalf("inspect created %s", s)
		}
	}
	if stamp(t, e.db) != db || stamp(t, p) != jsonl {
		t.Fatal("inspect changed a file")
	}

	// Against a live store (a writer holds -wal/-shm): reads it, leaves it.
	e.open()
	rep2 := e.replayTwice(p, ReplayOptions{SessionID: "s1"})
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: e.db, Session: "live", Linger: true, Count: 3})
	rep, err = Inspect(context.Background(), p, e.db, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.WouldAppend != 0 || rep.AlreadyPresent != rep2.Records || rep.StoreNote != "" {
		t.Fatalf("live store: %+v", rep)
	}
	if ok, err := w.Exited(); ok {
		t.Fatalf("writer died: %v", err)
	}
	for _, s := range []string{"-wal", "-shm"} {
		if _, err := os.Lstat(e.db + s); err != nil {
			t.Fatalf("%s gone after inspect: %v", s, err)
		}
	}
	if stamp(t, p) != jsonl {
		t.Fatal("the JSONL changed")
	}

	// Only one sidecar: not opened.
	if err := os.WriteFile(filepath.Join(e.dir, "odd.db"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "odd.db-wal"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err = Inspect(context.Background(), p, filepath.Join(e.dir, "odd.db"), ReplayOptions{})
	if err != nil || rep.WouldAppend != -1 || !strings.Contains(rep.StoreNote, "only one") {
		t.Fatalf("odd store: %+v %v", rep, err)
	}
}

// Acceptance 11: broken lines, a 10 MB line, invalid UTF-8 and an empty
// file: a clear report, the valid lines replayed.
func TestReplayDamagedFile(t *testing.T) {
	e := newReplayEnv(t)
	big := strings.Repeat("0123456789", 1<<20)
	p := e.writeJSONL("s1.jsonl",
		msg("user", "first", 1),
		`{"role": "user", "content": "cut off`,
		"not json",
		// A 10 MB tool result: FTS5 indexes only its first 8192 chars.
		line("role", "tool", "content", big, "tool_call_id", "call_1", "tool_name", "cat", "timestamp", 2),
		`{"role": "user", "content": "bad `+"\xff\xe2\x82"+` bytes", "timestamp": 3}`,
		`[1, 2]`,
		line("role", "", "content", "no role"),
		msg("user", "   ", 4),
		msg("assistant", "last", 5),
	)
	rep := e.replayTwice(p, ReplayOptions{})
	if rep.Appended != 4 || !rep.Partial() {
		t.Fatalf("%+v", rep)
	}
	var lines []int
	for _, l := range rep.Issues {
		lines = append(lines, l.Line)
	}
	if !slices.Equal(lines, []int{2, 3, 6, 7, 8}) || !slices.Equal(rep.Repaired, []int{5}) {
		t.Fatalf("issues %v repaired %v", rep.Issues, rep.Repaired)
	}
	ms := e.expectRows("s1", "user|first|1.0", "tool|"+big+"|2.0|call_1|cat|∅", "user|bad \ufffd\ufffd bytes|3.0", "assistant|last|5.0")
	if len(ms[1].Content.String) != 10<<20 {
		t.Fatal("the 10 MB line was cut")
	}
	e.checkStore("s1")

	empty := e.writeJSONL("empty.jsonl")
	rep = e.replayTwice(empty, ReplayOptions{})
	if rep.Lines != 0 || rep.Records != 0 || rep.Appended != 0 || rep.Partial() {
		t.Fatalf("empty file: %+v", rep)
	}
}

// A symlink to the JSONL seeds the chain with the real path, so replaying
// through it and directly never duplicates.
func TestReplayThroughSymlink(t *testing.T) {
	e := newReplayEnv(t)
	p := e.writeJSONL("s1.jsonl", msg("user", "A", 1), msg("assistant", "B", 2))
	link := filepath.Join(e.dir, "link.jsonl")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	rep := e.replayTwice(link, ReplayOptions{SessionID: "s1"})
	if rep.Path != p {
		t.Fatalf("seed path %s, want %s", rep.Path, p)
	}
	e.replayTwice(p, ReplayOptions{})
	e.expectRows("s1", "user|A|1.0", "assistant|B|2.0")
}

// Hermes refuses to append to a session compression closed; so does
// replay, unless there is nothing left to append.
func TestReplayRefusesCompressedSession(t *testing.T) {
	e := newReplayEnv(t)
	p := e.writeJSONL("s1.jsonl", msg("user", "old", 1))
	e.replayTwice(p, ReplayOptions{})
	if err := e.w.InTx(context.Background(), func(tx *store.Tx) error {
		_, err := tx.ExecContext(tx.Context(), "UPDATE sessions SET ended_at = 2, end_reason = 'compression' WHERE id = 's1'")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if rep, err := Replay(context.Background(), e.w, p, ReplayOptions{}); err != nil || rep.Appended != 0 {
		t.Fatalf("re-run into a closed session: %+v %v", rep, err)
	}
	p = e.writeJSONL("s1.jsonl", msg("user", "old", 1), msg("user", "new", 3))
	if _, err := Replay(context.Background(), e.w, p, ReplayOptions{}); !errors.Is(err, ErrCompressedSession) {
		t.Fatalf("want ErrCompressedSession, got %v", err)
	}
	e.expectRows("s1", "user|old|1.0")
}

// A missing session is created from the capture's row when divert gives
// one; the counters count what the replay appended.
func TestReplaySessionTemplate(t *testing.T) {
	e := newReplayEnv(t)
	p := e.writeJSONL("s1.jsonl", msg("user", "A", 1), msg("assistant", "B", 2))
	tmpl := &store.Session{ID: "captured-id", Source: "telegram", Model: sql.NullString{String: "m", Valid: true},
		Title: sql.NullString{String: "from the capture", Valid: true}, StartedAt: sql.NullFloat64{Float64: 42, Valid: true},
		MessageCount: sql.NullInt64{Int64: 99, Valid: true}, ProfileName: sql.NullString{String: "work", Valid: true}}
	rep := e.replayTwice(p, ReplayOptions{SessionID: "s1", Session: tmpl})
	if !rep.SessionCreated {
		t.Fatalf("%+v", rep)
	}
	s, err := store.ReadSession(context.Background(), e.w, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if s.Source != "telegram" || s.Model.String != "m" || s.Title.String != "from the capture" ||
		s.StartedAt.Float64 != 42 || s.ProfileName.String != "work" || s.MessageCount.Int64 != 2 {
		t.Fatalf("session from template: %+v", s)
	}
	e.checkStore("s1")
}

func TestReplayFileOpensAndRefuses(t *testing.T) {
	e := newReplayEnv(t)
	p := e.writeJSONL("s1.jsonl", msg("user", "A", 1))
	e.w.Close()
	rep, err := ReplayFile(context.Background(), e.db, p, ReplayOptions{})
	if err != nil || rep.Appended != 1 {
		t.Fatalf("%+v %v", rep, err)
	}
	for _, s := range []string{"-wal", "-shm"} {
		if _, err := os.Lstat(e.db + s); err != nil {
			t.Fatalf("closing after replay removed %s", s)
		}
	}
	if _, err := ReplayFile(context.Background(), filepath.Join(e.dir, "missing.db"), p, ReplayOptions{}); err == nil {
		t.Fatal("replayed into a missing store")
	}
	if _, err := os.Lstat(filepath.Join(e.dir, "missing.db")); err == nil {
		t.Fatal("created a store")
	}
	if _, err := ReplayFile(context.Background(), e.db, filepath.Join(e.dir, "nope.jsonl"), ReplayOptions{}); err == nil {
		t.Fatal("replayed a missing file")
	}
}
