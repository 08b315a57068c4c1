package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrNotSQLite means a file does not start with the SQLite magic.
var ErrNotSQLite = errors.New("not a SQLite database")

// NotHermesError says why a file is not a Hermes store. Err, when set, is
// the underlying cause (ErrNotSQLite, ErrNotRegular).
type NotHermesError struct {
	Path   string
	Reason string
	Err    error
}

func (e *NotHermesError) Error() string {
	p := e.Path
	if p == "" {
		p = "database"
	}
	return fmt.Sprintf("%s: not a Hermes store: %s", p, e.Reason)
}

func (e *NotHermesError) Unwrap() error { return e.Err }

// Schema is what a probe found in a store.
type Schema struct {
	// Shape is "hermes-v30" or "hermes-v31" when the store has exactly the
	// columns of that Hermes version, else "hermes-unknown-v<N>" (N from
	// schema_version, 0 if absent) for a store that has the core Hermes
	// tables but not a known shape.
	Shape   string
	Version int
	// Tables maps every table, virtual tables included, to its columns as
	// PRAGMA table_info lists them, in order.
	Tables map[string][]string
	// FTS, Trigram and CJK say whether messages_fts, messages_fts_trigram
	// and messages_fts_cjk exist.
	FTS, Trigram, CJK bool
	// CJKUnavailable: messages_fts_cjk exists but this binary cannot open
	// it (its cjk_unicode61 tokenizer is not built in), so inserting into
	// messages would fail in its trigger. Reading is unaffected.
	CJKUnavailable bool
	JournalMode    string
	// Missing lists "table.column" that the nearest known shape has and
	// this store lacks; empty for an exact shape.
	Missing []string
	// Warnings are things an operator should know that do not stop a probe.
	Warnings []string
}

// Has reports whether table exists and has column col.
func (s Schema) Has(table, col string) bool {
	return slices.Contains(s.Tables[table], col)
}

const (
	shapeV30 = "hermes-v30"
	shapeV31 = "hermes-v31"
)

// hermesCore are the columns without which a file is not a Hermes store.
var hermesCore = map[string][]string{
	"sessions": {"id", "source", "started_at"},
	"messages": {"id", "session_id", "role", "content", "timestamp"},
}

// hermesV30 are the v30 columns stateguard relies on (docs/hermes.md).
var hermesV30 = map[string][]string{
	"sessions": {"id", "source", "user_id", "model", "model_config", "parent_session_id",
		"started_at", "ended_at", "end_reason", "message_count", "tool_call_count", "title",
		"last_activity_at", "last_activity_description", "last_activity_provenance",
		"archived", "profile_name"},
	"messages": {"id", "session_id", "role", "content", "tool_call_id", "tool_calls",
		"tool_name", "effect_disposition", "timestamp", "token_count", "finish_reason",
		"reasoning", "reasoning_content", "reasoning_details", "codex_reasoning_items",
		"codex_message_items", "platform_message_id", "observed", "_compressed_summary",
		"active", "compacted", "api_content", "display_kind", "display_metadata",
		"display_identity", "display_order"},
}

// hermesV31Extra are the columns v31 adds.
var hermesV31Extra = map[string][]string{
	"sessions": {"auto_archived"},
	"messages": {"message_uid", "absorbed_message_uids", "tool_call_uids", "tool_call_uid"},
}

// Probe reads db's schema: every table's columns (PRAGMA table_info, never
// assumed), schema_version, the FTS tables and the journal mode, and
// classifies it. A database without the core Hermes tables and columns
// gets a *NotHermesError along with what was found.
func Probe(ctx context.Context, db *sql.DB) (Schema, error) {
	s := Schema{Tables: map[string][]string{}}
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&s.JournalMode); err != nil {
		return s, fmt.Errorf("probe journal mode: %w", err)
	}
	names, err := tableNames(ctx, db)
	if err != nil {
		return s, err
	}
	for _, name := range names {
		cols, err := tableColumns(ctx, db, name)
		if err != nil {
			s.Tables[name] = nil
			s.Warnings = append(s.Warnings, fmt.Sprintf("table %s cannot be opened: %v", name, err))
			if name == "messages_fts_cjk" {
				s.CJKUnavailable = true
			}
			continue
		}
		s.Tables[name] = cols
	}
	_, s.FTS = s.Tables["messages_fts"]
	_, s.Trigram = s.Tables["messages_fts_trigram"]
	_, s.CJK = s.Tables["messages_fts_cjk"]
	if s.CJKUnavailable {
		s.Warnings = append(s.Warnings, "messages_fts_cjk cannot be opened by this binary (Hermes' cjk_unicode61 tokenizer is not built in): messages cannot be appended to this store")
	}

	if s.Has("schema_version", "version") {
		var v sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT MAX(version) FROM schema_version").Scan(&v); err != nil {
			return s, fmt.Errorf("probe schema_version: %w", err)
		}
		s.Version = int(v.Int64)
	}

	if missing := s.missing(hermesCore); len(missing) > 0 {
		return s, &NotHermesError{Reason: "missing " + describeMissing(missing)}
	}
	miss30 := s.missing(hermesV30)
	miss31 := slices.Concat(miss30, s.missing(hermesV31Extra))
	switch {
	case s.Version == 30 && len(miss30) == 0:
		s.Shape = shapeV30
	case s.Version == 31 && len(miss31) == 0:
		s.Shape = shapeV31
	default:
		s.Shape = "hermes-unknown-v" + strconv.Itoa(s.Version)
		s.Missing = miss30
		if s.Version >= 31 {
			s.Missing = miss31
		}
	}
	return s, nil
}

func tableNames(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("probe tables: %w", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("probe tables: %w", err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("probe tables: %w", err)
	}
	return names, nil
}

func tableColumns(ctx context.Context, db *sql.DB, table string) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SELECT name FROM pragma_table_info(?) ORDER BY cid", table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	return cols, rows.Err()
}

// missing returns "table.column" for each column of want that s lacks, in
// a stable order; a missing table is reported as "table".
func (s Schema) missing(want map[string][]string) []string {
	var out []string
	tables := make([]string, 0, len(want))
	for t := range want {
		tables = append(tables, t)
	}
	slices.Sort(tables)
	for _, t := range tables {
		if _, ok := s.Tables[t]; !ok {
			out = append(out, t)
			continue
		}
		for _, c := range want[t] {
			if !s.Has(t, c) {
				out = append(out, t+"."+c)
			}
		}
	}
	return out
}

func describeMissing(missing []string) string {
	var parts []string
	for _, m := range missing {
		if !strings.Contains(m, ".") {
			parts = append(parts, m+" table")
		} else {
			parts = append(parts, "column "+m)
		}
	}
	return strings.Join(parts, ", ")
}

// ProbeFile probes the store at path. It checks the file before SQLite
// sees it: a symlink or non-regular file is refused (not followed), an
// empty file or one without the 16-byte SQLite magic is a
// *NotHermesError (wrapping ErrNotSQLite for the latter) and is never
// handed to SQLite, which would treat an empty file as an empty database.
// Everything is reached through a handle on the file's directory, taken
// once with no symlink in any component (OpenDir): the magic is read from
// the fd opened there, and SQLite opens the name only inside
// OpenSQLiteIn's checks against that directory.
//
// The magic is read through a raw fd that is closed before the probe
// connection opens; like ReadGeneration, ProbeFile must not run while this
// process holds a POSIX-locking SQLite connection on the same store.
func ProbeFile(ctx context.Context, path string) (Schema, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Schema{}, fmt.Errorf("probe %s: %w", path, err)
	}
	h, err := OpenDir(filepath.Dir(abs), DirID{})
	if err != nil {
		return Schema{}, fmt.Errorf("probe %s: %w", abs, err)
	}
	defer h.Close()
	name := filepath.Base(abs)
	if err := checkSQLiteFile(h, name); err != nil {
		return Schema{}, err
	}
	db, err := OpenSQLiteIn(h.Path(), h.ID(), name, func(p string) (*sql.DB, error) {
		db, err := OpenReadOnly(p)
		if err == nil {
			// SQLite opens the file now, between OpenSQLiteIn's two
			// checks; the pool keeps this one connection for the probe.
			if err = db.PingContext(ctx); err != nil {
				db.Close()
			}
		}
		return db, err
	})
	if err != nil {
		return Schema{}, Explain(abs, err)
	}
	defer db.Close()
	s, err := Probe(ctx, db)
	if nh, ok := errors.AsType[*NotHermesError](err); ok {
		nh.Path = abs
		return s, nh
	}
	if err != nil {
		return s, Explain(abs, fmt.Errorf("probe %s: %w", abs, err))
	}
	return s, nil
}

// checkSQLiteFile checks that name in h is a regular file starting with
// the SQLite magic.
func checkSQLiteFile(h *DirHandle, name string) error {
	abs := h.Join(name)
	st, err := h.Lstat(name)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	if !st.Exists {
		return fmt.Errorf("probe %s: %w", abs, fs.ErrNotExist)
	}
	if !st.Regular() {
		return &NotHermesError{Path: abs, Reason: fmt.Sprintf("it is a %s, not followed", fileType(st.Mode)), Err: ErrNotRegular}
	}
	f, err := h.OpenFile(name)
	if err != nil {
		if isLoop(err) || errors.Is(err, ErrNotRegular) {
			return &NotHermesError{Path: abs, Reason: "it became a symlink or another kind of file, not followed", Err: ErrNotRegular}
		}
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("probe %s: %w", abs, err)
		}
		return fmt.Errorf("probe: %w", err)
	}
	defer f.Close()
	b := make([]byte, len(MainMagic))
	n, err := io.ReadFull(f, b)
	switch {
	case n == 0 && (err == io.EOF || err == nil):
		return &NotHermesError{Path: abs, Reason: "empty file, no database in it yet"}
	case err != nil && err != io.ErrUnexpectedEOF:
		return fmt.Errorf("probe: read %s: %w", abs, err)
	case string(b[:n]) != MainMagic:
		return &NotHermesError{Path: abs, Reason: "no SQLite header (\"SQLite format 3\") at its start", Err: ErrNotSQLite}
	}
	return nil
}
