//go:build linux

package recovery

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/internal/pyjson"
	"github.com/stateguard/stateguard/store"
)

// sqlStore is a real Hermes store (FTS5 tables and triggers) written with
// plain SQL in WAL mode over one connection that never checkpoints on its
// own, so rows written after checkpoint() live only in the -wal, as an
// orphan's do.
type sqlStore struct {
	t    *testing.T
	path string
	db   *sql.DB
}

func newSQLStore(t *testing.T, path string) *sqlStore {
	t.Helper()
	if err := hermestest.CreateStore(path); err != nil {
		t.Fatal(err)
	}
	db := hermestest.OpenNoCheckpoint(t, path)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	s := &sqlStore{t: t, path: path, db: db}
	t.Cleanup(s.close)
	return s
}

func (s *sqlStore) close() {
	if s.db != nil {
		s.db.Close()
		s.db = nil
	}
}

func (s *sqlStore) exec(q string, args ...any) sql.Result {
	s.t.Helper()
	r, err := s.db.Exec(q, args...)
	if err != nil {
		s.t.Fatalf("%s: %v", q, err)
	}
	return r
}

func (s *sqlStore) session(id, source string, started float64, cols ...any) {
	s.t.Helper()
	q := "INSERT INTO sessions (id, source, started_at"
	args := []any{id, source, started}
	for i := 0; i < len(cols); i += 2 {
		q += ", " + cols[i].(string)
		args = append(args, cols[i+1])
	}
	q += ") VALUES (?" + strings.Repeat(", ?", len(args)-1) + ")"
	s.exec(q, args...)
}

// add appends a message with the given columns (pairs of name, value) the
// way Hermes does, counters included, and returns its id.
func (s *sqlStore) add(sid, role string, content any, ts float64, cols ...any) int64 {
	s.t.Helper()
	q := "INSERT INTO messages (session_id, role, content, timestamp"
	args := []any{sid, role, content, ts}
	calls := 0
	for i := 0; i < len(cols); i += 2 {
		q += ", " + cols[i].(string)
		args = append(args, cols[i+1])
		if cols[i] == "tool_calls" {
			calls = 1
		}
	}
	q += ") VALUES (?" + strings.Repeat(", ?", len(args)-1) + ")"
	id, err := s.exec(q, args...).LastInsertId()
	if err != nil {
		s.t.Fatal(err)
	}
	s.exec("UPDATE sessions SET message_count = message_count + 1, tool_call_count = tool_call_count + ? WHERE id = ?", calls, sid)
	return id
}

// checkpoint moves everything into the main file.
func (s *sqlStore) checkpoint() {
	s.t.Helper()
	var busy, logN, ckpt int
	if err := s.db.QueryRow("PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logN, &ckpt); err != nil || busy != 0 {
		s.t.Fatalf("checkpoint: busy %d: %v", busy, err)
	}
}

// copyMainTo copies the main file (what a checkpointed store holds) to
// dst, standing in for the healthy store a restore or a lost WAL leaves.
func (s *sqlStore) copyMainTo(dst string) {
	s.t.Helper()
	hermestest.CopyFile(s.t, s.path, dst, 0o600)
}

// capture copies the store's main and wal (and shm) with WriteCapture
// from fds opened here, as the incident copies them from pinned fds, and
// returns the capture directory.
func (s *sqlStore) capture(kind, incident string) string {
	s.t.Helper()
	src := openPinned(s.t, s.path)
	c, err := WriteCapture(context.Background(), src, CaptureRequest{
		DBPath: s.path, PID: os.Getpid(), Kind: kind, IncidentID: incident,
		Now: time.Date(2026, 10, 1, 7, 0, 0, 0, time.UTC)})
	if err != nil {
		s.t.Fatal(err)
	}
	return c.Dir
}

// divertEnv is a profile home with a healthy store, and a place for the
// orphan generation the captures are taken from.
type divertEnv struct {
	t       *testing.T
	dir     string
	home    string
	healthy string
	orphan  *sqlStore
}

func newDivertEnv(t *testing.T) *divertEnv {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := &divertEnv{t: t, dir: dir, home: filepath.Join(dir, "home")}
	for _, d := range []string{e.home, filepath.Join(dir, "orphan"), filepath.Join(dir, "tmp")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	e.healthy = filepath.Join(e.home, "state.db")
	e.orphan = newSQLStore(t, filepath.Join(dir, "orphan", "state.db"))
	return e
}

func (e *divertEnv) request(capture, incident, kind string) DivertRequest {
	return DivertRequest{Capture: capture, Store: e.healthy, IncidentID: incident, Kind: kind,
		TmpDir: filepath.Join(e.dir, "tmp")}
}

func (e *divertEnv) divert(req DivertRequest) DivertReport {
	e.t.Helper()
	rep, err := Divert(context.Background(), req)
	if err != nil {
		e.t.Fatal(err)
	}
	// The private copy is always removed.
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "tmp")); len(ents) != 0 {
		e.t.Fatalf("private copy left behind: %v", ents)
	}
	return rep
}

// healthyWriter is a writable connection to the healthy store, for the
// replay and for rows written after the incident.
func (e *divertEnv) healthyWriter() *store.Writable {
	e.t.Helper()
	w, err := store.OpenWritable(context.Background(), e.healthy)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { w.Close() })
	return w
}

// replayAll replays the files of rep (pre-replacement ones too when
// includePre) and returns how many rows were appended.
func (e *divertEnv) replayAll(w *store.Writable, rep DivertReport, includePre bool) int {
	e.t.Helper()
	n := 0
	for _, f := range rep.ReplayFiles(includePre) {
		r, err := Replay(context.Background(), w, f.Path, f.ReplayOptions())
		if err != nil {
			e.t.Fatal(err)
		}
		if r.Partial() {
			e.t.Fatalf("replay of %s is partial: %v %v", f.Path, r.Issues, r.Repaired)
		}
		n += r.Appended
	}
	return n
}

// keysOf lists the identities of a store's messages of sid, sorted.
func keysOf(t *testing.T, q store.Querier, sid string) []string {
	t.Helper()
	ms, err := store.ReadMessages(context.Background(), q, sid)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(ms))
	for i := range ms {
		k := keyOf(&ms[i])
		out[i] = strings.Join([]string{k.role, k.content, k.callID, k.name, k.calls, k.ts}, "|")
	}
	sort.Strings(out)
	return out
}

func readOnly(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := store.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// lines reads a JSONL's raw lines, each parsed with key order kept.
func jsonlLines(t *testing.T, path string) []pyjson.Value {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []pyjson.Value
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		v, err := pyjson.Parse(l)
		if err != nil {
			t.Fatalf("%s: %v: %q", path, err, l)
		}
		out = append(out, v)
	}
	return out
}

func keysInOrder(v pyjson.Value) []string {
	out := make([]string, len(v.Dict))
	for i, m := range v.Dict {
		out[i] = m.Key
	}
	return out
}
