package main

import (
	"bytes"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

func countRows(t *testing.T, db, session string) int {
	t.Helper()
	c, err := sql.Open("sqlite", "file:"+db+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var n int
	if err := c.QueryRow("SELECT count(*) FROM messages WHERE session_id = ?", session).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func writeFile(t *testing.T, p, data string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestReplayVerb(t *testing.T) {
	db := hermestest.NewStore(t)
	dir := filepath.Dir(db)
	good := filepath.Join(dir, "s1.jsonl")
	writeFile(t, good, `{"role": "user", "content": "A", "timestamp": 1}
{"role": "assistant", "content": "B", "timestamp": 2}
`)
	r := ctl(t, nil, "replay", good, "--db", db, "--now")
	if r.code != exitOK || !strings.Contains(r.stdout, "2 appended (session created)") {
		t.Fatalf("replay: %+v", r)
	}
	r = ctl(t, nil, "replay", "--now", "--db", db, good)
	if r.code != exitOK || !strings.Contains(r.stdout, "2 already present, 0 appended") {
		t.Fatalf("re-run: %+v", r)
	}
	r = ctl(t, nil, "replay", good, "--db", db, "--session-id", "other")
	if r.code != exitOK || countRows(t, db, "other") != 2 || countRows(t, db, "s1") != 2 {
		t.Fatalf("other session: %+v", r)
	}

	bad := filepath.Join(dir, "s2.jsonl")
	writeFile(t, bad, "{\"role\": \"user\", \"content\": \"ok\", \"timestamp\": 1}\nnot json\n{\"role\": \"user\", \"content\": \"x\xff\", \"timestamp\": 2}\n")
	r = ctl(t, nil, "replay", bad, "--db", db)
	if r.code != exitPartial || !strings.Contains(r.stderr, "skipped line 2: invalid JSON") ||
		!strings.Contains(r.stderr, "repaired line 3") || countRows(t, db, "s2") != 2 {
		t.Fatalf("damaged file: %+v", r)
	}
}

// TestReplayVerbInspect: --inspect-only opens no database unless one is
// named, and then creates no file next to it.
func TestReplayVerbInspect(t *testing.T) {
	db := hermestest.NewStore(t)
	dir := filepath.Dir(db)
	p := filepath.Join(dir, "s1.jsonl")
	writeFile(t, p, `{"role": "user", "content": "A", "timestamp": 1}`+"\n")
	before, _ := os.ReadFile(db)

	r := ctl(t, map[string]string{"HERMES_HOME": dir}, "replay", p, "--inspect-only")
	if r.code != exitOK || !strings.Contains(r.stdout, "Lines: 1") || !strings.Contains(r.stdout, "no database opened") {
		t.Fatalf("inspect: %+v", r)
	}
	r = ctl(t, nil, "replay", p, "--inspect-only", "--db", db)
	if r.code != exitOK || !strings.Contains(r.stdout, "Would append: 1 (0 already present") {
		t.Fatalf("inspect with store: %+v", r)
	}
	after, _ := os.ReadFile(db)
	if !bytes.Equal(before, after) {
		t.Fatal("inspect wrote the store")
	}
	for _, s := range []string{"-wal", "-shm"} {
		if _, err := os.Lstat(db + s); err == nil {
			t.Fatalf("inspect created %s", s)
		}
	}
}

func TestReplayVerbProfiles(t *testing.T) {
	home := t.TempDir()
	work := filepath.Join(home, "profiles", "work", "state.db")
	if err := os.MkdirAll(filepath.Dir(work), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := hermestest.CreateStore(work); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "s1.jsonl")
	writeFile(t, p, `{"role": "user", "content": "A", "timestamp": 1}`+"\n")

	r := ctl(t, nil, "replay", p, "--home", home, "--profile", "work")
	if r.code != exitOK || countRows(t, work, "s1") != 1 {
		t.Fatalf("--home --profile: %+v", r)
	}
	r = ctl(t, map[string]string{"HERMES_HOME": filepath.Join(home, "profiles", "work")}, "replay", p, "--profile", "work", "--session-id", "s9")
	if r.code != exitOK || countRows(t, work, "s9") != 1 {
		t.Fatalf("HERMES_HOME of a profile: %+v", r)
	}
	// The default profile has no store yet: refused, never created.
	r = ctl(t, nil, "replay", p, "--home", home)
	if r.code != exitError {
		t.Fatalf("missing default store: %+v", r)
	}
	if _, err := os.Lstat(filepath.Join(home, "state.db")); err == nil {
		t.Fatal("created the default store")
	}
	r = ctl(t, nil, "replay", p, "--home", home, "--profile", "nope")
	if r.code != exitError || !strings.Contains(r.stderr, `no profile "nope"`) {
		t.Fatalf("unknown profile: %+v", r)
	}
}

func TestReplayVerbUsage(t *testing.T) {
	for _, args := range [][]string{
		{"replay"},
		{"replay", "a.jsonl", "b.jsonl"},
		{"replay", "a.jsonl", "--db", "x", "--profile", "p"},
		{"replay", "a.jsonl", "--no-such-flag"},
	} {
		if r := ctl(t, nil, args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want usage", args, r.code)
		}
	}
	if r := ctl(t, nil, "replay", "--help"); r.code != exitOK || !strings.Contains(r.stdout, "--inspect-only") {
		t.Errorf("help: %+v", r)
	}
	if r := ctl(t, nil, "replay", filepath.Join(t.TempDir(), "missing.jsonl"), "--db", "/nonexistent/state.db"); r.code != exitError {
		t.Errorf("missing files: %+v", r)
	}
}

// `agentctl replay --now` of a large file streams it: agentctl's heap
// grows by far less than the file's size, and every line is appended.
func TestReplayNowStreamsLargeFile(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "big.jsonl")
	const lines = 48
	size, err := hermestest.WriteBigJSONL(p, lines, 512<<10)
	if err != nil {
		t.Fatal(err)
	}
	var r ctlResult
	grew := hermestest.HeapGrowth(func() { r = ctl(t, noDaemon(t), "replay", p, "--db", db, "--now") })
	if r.code != exitOK || !strings.Contains(r.stdout, "48 appended") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	t.Logf("file %d bytes, heap grew by at most %d bytes", size, grew)
	if grew > size/2 {
		t.Fatalf("heap grew by %d bytes replaying a %d-byte file: agentctl replay holds the file in memory", grew, size)
	}
}
