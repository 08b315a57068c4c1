//go:build linux

package recovery

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/internal/pyjson"
	"github.com/stateguard/stateguard/store"
)

const callsJSON = `[{"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": "{\"x\": 1}"}}]`

// sidecarLostEnv: session s1 has rows 1-4 in the main (the healthy store
// is a copy of it: the WAL was lost), then the orphan writes into its WAL
// a tool call and its result, a plain turn with every durable field, a
// second copy of an existing row, and a new session s2 with a row; the
// healthy store goes on with a row of its own.
func sidecarLostEnv(t *testing.T) (*divertEnv, string) {
	e := newDivertEnv(t)
	o := e.orphan
	o.session("s1", "cli", 1000, "model", "m1", "title", "first")
	o.add("s1", "user", "hello", 1001)
	o.add("s1", "assistant", "hi there", 1002)
	o.add("s1", "user", "again", 1003)
	o.add("s1", "assistant", "sure", 1004)
	o.checkpoint()
	o.copyMainTo(e.healthy)

	o.add("s1", "assistant", nil, 1005, "tool_calls", callsJSON, "finish_reason", "tool_calls")
	o.add("s1", "tool", `{"result": 2}`, 1006, "tool_call_id", "call_1", "tool_name", "calc")
	o.add("s1", "assistant", "the answer is 2 — ✓", 1007,
		"reasoning", "because", "reasoning_details", `[{"type": "summary", "text": "x"}]`,
		"codex_reasoning_items", `{"a": 1}`, "_compressed_summary", 1, "api_content", "api text",
		"display_kind", "answer", "display_metadata", `{"k": "v"}`, "platform_message_id", "pm-7",
		"finish_reason", "stop")
	o.add("s1", "user", "again", 1003) // a second row identical to one the store has
	o.add("s1", "assistant", "", 1008) // blank, no tool call: Hermes' replay drops it
	o.session("s2", "telegram", 1100, "model", "m2", "title", "side chat", "parent_session_id", "s1",
		"user_id", "u9", "profile_name", "work", "message_count", 1)
	o.add("s2", "user", "in s2", 1101)
	capture := o.capture(KindSidecarLost, "inc-1")

	w := e.healthyWriter()
	err := w.InTx(context.Background(), func(tx *store.Tx) error {
		_, err := tx.AppendMessage(store.Message{SessionID: "s1", Role: "user",
			Content: nullStr("after the incident"), Timestamp: nullF(2000)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	return e, capture
}

func TestDivertSidecarLost(t *testing.T) {
	e, capture := sidecarLostEnv(t)
	rep := e.divert(e.request(capture, "inc-1", KindSidecarLost))

	dir := filepath.Join(e.home, "sessions", "recovered", "inc-1")
	if rep.Dir != dir || rep.Existing || rep.Kind != KindSidecarLost || rep.Sessions != 2 {
		t.Fatalf("report: %+v", rep)
	}
	if rep.CaptureRows != 10 || rep.HealthyRows != 5 || rep.ReplayRows != 5 || rep.PreReplacementRows != 0 || rep.Unreplayable != 1 {
		t.Fatalf("counts: capture %d healthy %d replay %d pre %d unreplayable %d",
			rep.CaptureRows, rep.HealthyRows, rep.ReplayRows, rep.PreReplacementRows, rep.Unreplayable)
	}
	if len(rep.Files) != 2 {
		t.Fatalf("files: %+v", rep.Files)
	}
	f1, f2 := rep.Files[0], rep.Files[1]
	if f1.SessionID != "s1" || f1.Path != filepath.Join(dir, "s1.jsonl") || f1.Rows != 4 || f1.NewSession || f1.Session != nil || f1.PreReplacement {
		t.Fatalf("s1 file: %+v", f1)
	}
	if f2.SessionID != "s2" || f2.Rows != 1 || !f2.NewSession || f2.Session == nil {
		t.Fatalf("s2 file: %+v", f2)
	}
	if s := f2.Session; s.Source != "telegram" || s.Model.String != "m2" || s.Title.String != "side chat" ||
		s.ParentSessionID.String != "s1" || s.UserID.String != "u9" || s.StartedAt.Float64 != 1100 || s.ProfileName.String != "work" {
		t.Fatalf("s2 session row: %+v", s)
	}

	// Hermes' key order, the capture's ids, every line a record.
	want := append(slices.Clone(divertKeys), "_row_id")
	lines := jsonlLines(t, f1.Path)
	var rowIDs []string
	for _, l := range lines {
		if got := keysInOrder(l); !slices.Equal(got, want) {
			t.Fatalf("keys %v, want %v", got, want)
		}
		id, _ := l.Get("_row_id")
		rowIDs = append(rowIDs, id.Int)
	}
	if !slices.Equal(rowIDs, []string{"5", "6", "7", "8"}) {
		t.Fatalf("_row_id %v, want the capture's ids 5-8", rowIDs)
	}
	d, err := ParseDivertedFile(f1.Path)
	if err != nil || len(d.Issues) != 0 || len(d.Repaired) != 0 || len(d.Records) != 4 {
		t.Fatalf("parse: %v issues %v repaired %v records %d", err, d.Issues, d.Repaired, len(d.Records))
	}
	b, _ := os.ReadFile(f1.Path)
	for _, c := range b {
		if c >= 0x80 {
			t.Fatal("diverted JSONL is not plain ASCII (ensure_ascii)")
		}
	}

	// The tool call and its result keep their fields.
	call, result, full := lines[0], lines[1], lines[2]
	expectField(t, call, "content", pyjson.Value{})
	expectField(t, call, "finish_reason", pyjson.String("tool_calls"))
	if c, _ := call.Get("tool_calls"); c.Kind != pyjson.KindList || c.Dumps(pyjson.DumpOptions{}) != callsJSON {
		t.Fatalf("tool_calls: %s", c.Dumps(pyjson.DumpOptions{}))
	}
	expectField(t, result, "tool_call_id", pyjson.String("call_1"))
	expectField(t, result, "tool_name", pyjson.String("calc"))
	expectField(t, result, "content", pyjson.String(`{"result": 2}`))
	expectField(t, result, "timestamp", pyjson.Float64(1006))
	expectField(t, full, "content", pyjson.String("the answer is 2 — ✓"))
	expectField(t, full, "_compressed_summary", pyjson.Value{Kind: pyjson.KindBool, Bool: true})
	expectField(t, full, "platform_message_id", pyjson.String("pm-7"))
	if v, _ := full.Get("reasoning_details"); v.Kind != pyjson.KindList {
		t.Fatalf("reasoning_details: %s", v.Dumps(pyjson.DumpOptions{}))
	}
	if v, _ := full.Get("display_metadata"); v.Kind != pyjson.KindDict || v.Dumps(pyjson.DumpOptions{}) != `{"k": "v"}` {
		t.Fatalf("display_metadata: %s", v.Dumps(pyjson.DumpOptions{}))
	}
	expectField(t, lines[3], "content", pyjson.String("again"))

	checkDivertModes(t, dir)
	// Hermes' own sessions/<id>.jsonl are never written.
	for _, sid := range []string{"s1", "s2"} {
		if _, err := os.Lstat(filepath.Join(e.home, "sessions", sid+".jsonl")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("sessions/%s.jsonl: %v", sid, err)
		}
	}
}

func nullStr(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }
func nullF(f float64) sql.NullFloat64 { return sql.NullFloat64{Float64: f, Valid: true} }

func expectField(t *testing.T, line pyjson.Value, key string, want pyjson.Value) {
	t.Helper()
	got, ok := line.Get(key)
	if !ok || got.Kind != want.Kind || !pyjson.Equal(got, want) {
		t.Fatalf("%s = %s, want %s", key, got.Dumps(pyjson.DumpOptions{}), want.Dumps(pyjson.DumpOptions{}))
	}
}

// checkDivertModes: directories 0700, files 0600, owned like the store,
// no staging left.
func checkDivertModes(t *testing.T, dir string) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(dir))), "state.db"), &st); err != nil {
		t.Fatal(err)
	}
	uid, gid := st.Uid, st.Gid
	for _, d := range []string{filepath.Dir(filepath.Dir(dir)), filepath.Dir(dir)} {
		fi, err := os.Lstat(d)
		if err != nil || fi.Mode() != os.ModeDir|0o700 {
			t.Fatalf("%s: %v %v", d, fi.Mode(), err)
		}
	}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = os.ModeDir | 0o700
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
		}
		if s := fi.Sys().(*syscall.Stat_t); s.Uid != uid || s.Gid != gid {
			t.Errorf("%s: owner %d:%d, want %d:%d", p, s.Uid, s.Gid, uid, gid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Dir(dir))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), divertStagingSuffix) {
			t.Fatalf("staging left: %s", e.Name())
		}
	}
}

// TestDivertThenReplay: every capture row ends up in the healthy store
// exactly once, after divert, replay, and a replay again; a new session
// gets the capture's columns; a second divert finds nothing missing.
func TestDivertThenReplay(t *testing.T) {
	e, capture := sidecarLostEnv(t)
	rep := e.divert(e.request(capture, "inc-1", KindSidecarLost))
	w := e.healthyWriter()
	if n := e.replayAll(w, rep, false); n != 5 {
		t.Fatalf("replay appended %d, want 5", n)
	}
	if n := e.replayAll(w, rep, false); n != 0 {
		t.Fatalf("replay again appended %d", n)
	}
	w.Close()

	capDB := openCaptureCopy(t, capture)
	hdb := readOnly(t, e.healthy)
	// s1: every capture row but the blank one (which Hermes' replay
	// drops), plus the healthy store's own row.
	capKeys := keysOf(t, capDB, "s1")
	got := keysOf(t, hdb, "s1")
	wantKeys := []string{}
	for _, k := range capKeys {
		if !strings.HasPrefix(k, `assistant|""|`) {
			wantKeys = append(wantKeys, k)
		}
	}
	if len(got) != len(wantKeys)+1 {
		t.Fatalf("s1 has %d rows, want %d:\n%s", len(got), len(wantKeys)+1, strings.Join(got, "\n"))
	}
	for _, k := range wantKeys {
		i := slices.Index(got, k)
		if i < 0 {
			t.Fatalf("capture row %s missing from the healthy store", k)
		}
		got = slices.Delete(got, i, i+1)
	}
	if len(got) != 1 || !strings.Contains(got[0], "after the incident") {
		t.Fatalf("left over: %v", got)
	}
	if c, h := keysOf(t, capDB, "s2"), keysOf(t, hdb, "s2"); !slices.Equal(c, h) {
		t.Fatalf("s2: capture %v healthy %v", c, h)
	}
	s2, err := store.ReadSession(context.Background(), hdb, "s2")
	if err != nil {
		t.Fatal(err)
	}
	if s2.Source != "telegram" || s2.Model.String != "m2" || s2.Title.String != "side chat" || s2.ParentSessionID.String != "s1" ||
		s2.StartedAt.Float64 != 1100 || s2.MessageCount.Int64 != 1 {
		t.Fatalf("s2 created as %+v", s2)
	}
	// The tool rows came through with their fields.
	ms, err := store.ReadMessages(context.Background(), hdb, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var call, result *store.Message
	for i := range ms {
		if ms[i].ToolCalls.Valid {
			call = &ms[i]
		}
		if ms[i].Role == "tool" {
			result = &ms[i]
		}
	}
	if call == nil || call.Content.Valid || call.FinishReason.String != "tool_calls" || call.ToolCallCount() != 1 ||
		result == nil || result.ToolCallID.String != "call_1" || result.ToolName.String != "calc" || result.Timestamp.Float64 != 1006 {
		t.Fatalf("tool rows: %+v %+v", call, result)
	}
	checkIntegrity(t, e.healthy)

	// Nothing is missing any more: a divert for another incident is empty.
	again := e.divert(e.request(capture, "inc-2", KindSidecarLost))
	if len(again.Files) != 0 || again.ReplayRows != 0 || again.Unreplayable != 1 {
		t.Fatalf("second divert: %+v", again)
	}
}

func openCaptureCopy(t *testing.T, capture string) *store.Writable {
	t.Helper()
	p, err := PrivateCopy(context.Background(), capture, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w, err := store.OpenWritable(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// checkIntegrity: integrity_check ok and both FTS5 indexes consistent
// with messages.
func checkIntegrity(t *testing.T, path string) {
	t.Helper()
	w, err := store.OpenWritable(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.InTx(context.Background(), func(tx *store.Tx) error {
		rows, err := tx.QueryContext(tx.Context(), "PRAGMA integrity_check")
		if err != nil {
			return err
		}
		var ic string
		for rows.Next() {
			if err := rows.Scan(&ic); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if ic != "ok" {
			return errors.New("integrity_check: " + ic)
		}
		for _, q := range []string{
			`INSERT INTO messages_fts(messages_fts) VALUES('integrity-check')`,
			`INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES('integrity-check')`,
		} {
			if _, err := tx.ExecContext(tx.Context(), q); err != nil {
				return errors.New(q + ": " + err.Error())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestDivertReplacedSplit(t *testing.T) {
	e := newDivertEnv(t)
	o := e.orphan
	o.session("r1", "cli", 100)
	base := float64(1_790_000_000)
	for i := range 2 {
		o.add("r1", "user", "kept "+itoa(i), base+float64(i))
	}
	o.checkpoint()
	o.copyMainTo(e.healthy) // the backup the restore put back
	for i := 2; i < 10; i++ {
		o.add("r1", "user", "row "+itoa(i), base+float64(i))
	}
	capture := o.capture(KindReplaced, "inc-r")

	// Replaced at base+4: rows 2-4 were rolled back on purpose (the row at
	// exactly base+4 too), rows 5-9 are the orphan's.
	req := e.request(capture, "inc-r", KindReplaced)
	req.ReplacedAt = time.Unix(int64(base)+4, 0)
	rep := e.divert(req)
	if rep.ReplayRows != 5 || rep.PreReplacementRows != 3 || len(rep.Files) != 2 || !rep.ReplacedAt.Equal(req.ReplacedAt) {
		t.Fatalf("report: %+v", rep)
	}
	post, pre := rep.Files[0], rep.Files[1]
	if post.PreReplacement || post.Rows != 5 || !pre.PreReplacement || pre.Rows != 3 ||
		pre.Path != filepath.Join(rep.Dir, "pre-replacement", "r1.jsonl") {
		t.Fatalf("files: %+v", rep.Files)
	}
	contents := func(p string) []string {
		var out []string
		for _, l := range jsonlLines(t, p) {
			c, _ := l.Get("content")
			out = append(out, c.Str)
		}
		return out
	}
	if got := contents(post.Path); !slices.Equal(got, []string{"row 5", "row 6", "row 7", "row 8", "row 9"}) {
		t.Fatalf("replay set: %v", got)
	}
	if got := contents(pre.Path); !slices.Equal(got, []string{"row 2", "row 3", "row 4"}) {
		t.Fatalf("pre-replacement set: %v", got)
	}
	if got := rep.ReplayFiles(false); len(got) != 1 || got[0].Path != post.Path {
		t.Fatalf("ReplayFiles(false): %+v", got)
	}
	checkDivertModes(t, rep.Dir)

	w := e.healthyWriter()
	if n := e.replayAll(w, rep, false); n != 5 {
		t.Fatalf("replay appended %d", n)
	}
	if n := countContent(t, w, "r1", "row 3"); n != 0 {
		t.Fatal("a rolled-back row was replayed without being asked")
	}
	if n := e.replayAll(w, rep, true); n != 3 {
		t.Fatalf("replay with pre-replacement appended %d, want 3", n)
	}
	if n := e.replayAll(w, rep, true); n != 0 {
		t.Fatalf("replay again appended %d", n)
	}
	if c, h := keysOf(t, openCaptureCopy(t, capture), "r1"), keysOf(t, w, "r1"); !slices.Equal(c, h) {
		t.Fatalf("capture %v\nhealthy %v", c, h)
	}
}

func countContent(t *testing.T, q store.Querier, sid, content string) int {
	t.Helper()
	ms, err := store.ReadMessages(context.Background(), q, sid)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range ms {
		if m.Content.String == content {
			n++
		}
	}
	return n
}

// A capture of an empty database (a stray sqlite3 opened state.db while
// a restore had it missing, so SQLite created it, and the restore's rename
// then orphaned it) holds no rows: the divert finds nothing to replay
// instead of failing on "no such table: messages" five times (the 1000-
// cycle chaos run's failed replaced incident). Nor does one whose Hermes
// schema was half created. A capture with other tables and no messages
// is still refused.
func TestDiffCaptureSchemaless(t *testing.T) {
	dir := t.TempDir()
	healthyPath := filepath.Join(dir, "state.db")
	if err := hermestest.CreateStore(healthyPath); err != nil {
		t.Fatal(err)
	}
	healthy, err := sql.Open("sqlite", "file:"+healthyPath+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer healthy.Close()
	capPath := filepath.Join(dir, "capture.db")
	capDB, err := sql.Open("sqlite", "file:"+capPath)
	if err != nil {
		t.Fatal(err)
	}
	defer capDB.Close()
	ctx := context.Background()
	diffs, err := diffCapture(ctx, capDB, healthy, replayCut{at: time.Now()}, nil)
	if err != nil || len(diffs) != 0 {
		t.Fatalf("diff of an empty capture: %v, %v; want nothing and no error", diffs, err)
	}
	if _, err := capDB.Exec("CREATE TABLE other (x)"); err != nil {
		t.Fatal(err)
	}
	if _, err := diffCapture(ctx, capDB, healthy, replayCut{at: time.Now()}, nil); err == nil {
		t.Fatal("a capture with tables but no messages diffed without an error")
	}
	// Hermes' schema begun but not finished (a writer creating the
	// schema of a store that had lost it, orphaned before it created
	// messages): no message, nothing to replay.
	if _, err := capDB.Exec("CREATE TABLE schema_version (version INTEGER NOT NULL); CREATE TABLE sessions (id TEXT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	diffs, err = diffCapture(ctx, capDB, healthy, replayCut{at: time.Now()}, nil)
	if err != nil || len(diffs) != 0 {
		t.Fatalf("diff of a capture with Hermes' schema half created: %v, %v; want nothing and no error", diffs, err)
	}
}
