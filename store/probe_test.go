package store

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// execStore runs DDL on a store no process is using.
func execStore(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", hermestest.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func newStore(t *testing.T, stmts ...string) string {
	t.Helper()
	p := filepath.Join(realTemp(t), "state.db")
	createStore(t, p)
	execStore(t, p, stmts...)
	return p
}

func TestProbeV30(t *testing.T) {
	s, err := ProbeFile(t.Context(), newStore(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.Shape != "hermes-v30" || s.Version != 30 || !s.FTS || !s.Trigram || s.CJK || s.CJKUnavailable ||
		s.JournalMode != "wal" || len(s.Missing) != 0 || len(s.Warnings) != 0 {
		t.Fatalf("schema %+v", s)
	}
	if !s.Has("messages", "display_order") || s.Has("messages", "message_uid") || s.Has("nosuch", "id") {
		t.Fatal("Has is wrong")
	}
	if cols := s.Tables["messages_fts"]; !slices.Equal(cols, []string{"content", "tool_name", "tool_calls"}) {
		t.Fatalf("messages_fts columns %v", cols)
	}
}

func TestProbeV31(t *testing.T) {
	s, err := ProbeFile(t.Context(), newStore(t, hermestest.SchemaV31Extra))
	if err != nil {
		t.Fatal(err)
	}
	if s.Shape != "hermes-v31" || s.Version != 31 || !s.Has("messages", "tool_call_uid") || !s.Has("sessions", "auto_archived") {
		t.Fatalf("schema %+v", s)
	}
}

func TestProbeUnknownShapes(t *testing.T) {
	cases := []struct {
		name, want string
		missing    []string
		stmts      []string
	}{
		{"older version", "hermes-unknown-v29", nil, []string{"UPDATE schema_version SET version = 29"}},
		{"v31 label, v30 columns", "hermes-unknown-v31",
			[]string{"messages.message_uid", "messages.absorbed_message_uids", "messages.tool_call_uids", "messages.tool_call_uid", "sessions.auto_archived"},
			[]string{"UPDATE schema_version SET version = 31"}},
		{"v30 missing a column", "hermes-unknown-v30", []string{"messages.display_kind"},
			[]string{"ALTER TABLE messages DROP COLUMN display_kind"}},
		{"no schema_version", "hermes-unknown-v0", nil, []string{"DROP TABLE schema_version"}},
	}
	for _, c := range cases {
		s, err := ProbeFile(t.Context(), newStore(t, c.stmts...))
		if err != nil || s.Shape != c.want || !slices.Equal(s.Missing, c.missing) {
			t.Errorf("%s: shape %q missing %v err %v; want %q %v", c.name, s.Shape, s.Missing, err, c.want, c.missing)
		}
	}
}

func TestProbeCJKWithoutTokenizer(t *testing.T) {
	// A real Hermes store may carry messages_fts_cjk with a loadable
	// tokenizer this binary lacks; SQLite cannot create such a table here,
	// so write its schema row directly, as the other binary would have.
	p := newStore(t,
		"PRAGMA writable_schema=ON",
		`INSERT INTO sqlite_master(type, name, tbl_name, rootpage, sql) VALUES ('table', 'messages_fts_cjk', 'messages_fts_cjk', 0,
		 'CREATE VIRTUAL TABLE messages_fts_cjk USING fts5(content, content=''messages'', content_rowid=''id'', tokenize=''cjk_unicode61'')')`,
		"PRAGMA writable_schema=OFF",
	)
	s, err := ProbeFile(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if !s.CJK || !s.CJKUnavailable || s.Shape != "hermes-v30" || len(s.Warnings) != 2 ||
		!strings.Contains(strings.Join(s.Warnings, "\n"), "cjk_unicode61") {
		t.Fatalf("schema %+v", s)
	}
}

func TestProbeNotHermes(t *testing.T) {
	dir := realTemp(t)
	plain := filepath.Join(dir, "plain.db")
	execStore(t, plain, "CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)")
	almost := filepath.Join(dir, "almost.db")
	execStore(t, almost, "CREATE TABLE sessions(id TEXT PRIMARY KEY, source TEXT, started_at REAL)",
		"CREATE TABLE messages(id INTEGER PRIMARY KEY, session_id TEXT, content TEXT)")
	text := filepath.Join(dir, "text.db")
	writeFile(t, text, "hello, I am not a database, but I am long enough to have a header\n")
	short := filepath.Join(dir, "short.db")
	writeFile(t, short, "SQLite format")
	empty := filepath.Join(dir, "empty.db")
	writeFile(t, empty, "")

	cases := []struct {
		path, reason string
		notSQLite    bool
	}{
		{plain, "missing messages table, sessions table", false},
		{almost, "missing column messages.role, column messages.timestamp", false},
		{text, "no SQLite header", true},
		{short, "no SQLite header", true},
		{empty, "empty file", false},
	}
	for _, c := range cases {
		before := fingerprint(t, c.path)
		_, err := ProbeFile(t.Context(), c.path)
		var nh *NotHermesError
		if !errors.As(err, &nh) || nh.Path != c.path || !strings.Contains(nh.Reason, c.reason) ||
			errors.Is(err, ErrNotSQLite) != c.notSQLite {
			t.Errorf("%s: %v; want reason %q, ErrNotSQLite %v", filepath.Base(c.path), err, c.reason, c.notSQLite)
		}
		if c.notSQLite || c.path == empty {
			// Never handed to SQLite: not even a -wal or -journal appears.
			if after := fingerprint(t, c.path); after != before {
				t.Errorf("%s changed by the probe:\n%s\n%s", c.path, before, after)
			}
		}
	}
	if _, err := ProbeFile(t.Context(), filepath.Join(dir, "missing.db")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "missing.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("probe created the missing file: %v", err)
	}
}

func TestOpenReadOnly(t *testing.T) {
	dir := realTemp(t)
	// '?' and '#' and '%' in a path must not end the file name.
	createStore(t, filepath.Join(dir, "plain", "state.db")) // the fixture's DSN cannot take such a path
	if err := os.Rename(filepath.Join(dir, "plain"), filepath.Join(dir, "odd?dir#x%41")); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "odd?dir#x%41", "state.db")
	db, err := OpenReadOnly(p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow("SELECT version FROM schema_version").Scan(&v); err != nil || v != 30 {
		t.Fatalf("read: %d, %v", v, err)
	}
	if _, err := db.Exec("CREATE TABLE x(y)"); err == nil {
		t.Fatal("write on a read-only connection succeeded")
	}
	if _, err := db.Exec("INSERT INTO state_meta(key, value) VALUES ('k', 'v')"); err == nil {
		t.Fatal("insert on a read-only connection succeeded")
	}
	if _, err := os.Lstat(filepath.Join(dir, "odd")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the path was cut at '?'")
	}
	missing := filepath.Join(dir, "missing.db")
	if _, err := OpenReadOnly(missing); err == nil {
		t.Fatal("opened a missing file")
	}
	if _, err := os.Lstat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("OpenReadOnly created a file")
	}
	if _, err := OpenReadOnly(dir); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("directory: %v", err)
	}
}

// TestProbeLiveStore: probing a store under a live writer neither disturbs
// the writer nor changes the store's generation (a read-only connection
// never checkpoints or unlinks the sidecars on close).
func TestProbeLiveStore(t *testing.T) {
	db := filepath.Join(realTemp(t), "state.db")
	createStore(t, db)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 500})
	g0 := readGen(t, db)
	for range 5 {
		s, err := ProbeFile(t.Context(), db)
		if err != nil || s.Shape != "hermes-v30" {
			t.Fatalf("probe under writer: %+v, %v", s.Shape, err)
		}
	}
	if c := readGen(t, db).Diff(g0); c&^WALReset != 0 {
		t.Fatalf("probe changed the generation: %v", c)
	}
	if exited, err := w.Exited(); exited {
		t.Fatalf("writer died during the probes: %v", err)
	}
}
