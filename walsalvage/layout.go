package walsalvage

import (
	"fmt"
	"slices"
)

// The tables salvaged.
const (
	TableMessages = "messages"
	TableSessions = "sessions"
)

// layout is one description of a table's stored columns: from the WAL's
// own schema, a supplied main file's, or a known Hermes version's.
type layout struct {
	Table   string
	Source  string // "wal", "main" or the name of a built-in layout
	Columns []column
	// key are the columns every record of the table must have with the
	// storage class given: what tells this table's records from another's.
	key []keyColumn
	min int // fewest fields a record may have: up to the last key column
}

type keyColumn struct {
	index int
	want  func(Kind) bool
}

func isText(k Kind) bool    { return k == Text }
func isNumeric(k Kind) bool { return k == Integer || k == Real }
func isNull(k Kind) bool    { return k == Null }
func isInteger(k Kind) bool { return k == Integer }

// keyOf are the columns, by name, that identify each salvaged table.
// Every Hermes version has them with these classes: session_id and role
// TEXT NOT NULL and timestamp REAL NOT NULL in messages (whose id is the
// rowid, NULL in the record), id and source TEXT and started_at REAL NOT
// NULL in sessions. A REAL column may hold an integer: SQLite stores a
// whole number that way to save space. The flag columns are INTEGER NOT
// NULL where they exist.
var keyOf = map[string][]struct {
	name     string
	want     func(Kind) bool
	required bool
}{
	TableMessages: {
		{"id", isNull, true}, {"session_id", isText, true}, {"role", isText, true}, {"timestamp", isNumeric, true},
		{"_compressed_summary", isInteger, false}, {"active", isInteger, false}, {"compacted", isInteger, false},
	},
	TableSessions: {
		{"id", isText, true}, {"source", isText, true}, {"started_at", isNumeric, true},
		{"archived", isInteger, false},
	},
}

// newLayout checks that cols has the table's key columns and derives how
// its records are recognised.
func newLayout(table, source string, cols []column) (layout, error) {
	l := layout{Table: table, Source: source, Columns: cols}
	for _, k := range keyOf[table] {
		i := slices.IndexFunc(cols, func(c column) bool { return c.Name == k.name })
		if i < 0 {
			if k.required {
				return layout{}, fmt.Errorf("%s layout from %s has no column %s", table, source, k.name)
			}
			continue
		}
		l.key = append(l.key, keyColumn{index: i, want: k.want})
		if k.required {
			l.min = max(l.min, i+1)
		}
	}
	return l, nil
}

// fits reports whether a record with these serial types can be a row of
// the layout's table: no more fields than columns, at least up to the last
// required key column (rows written before an ALTER TABLE ADD COLUMN have
// fewer), every present key column of its class, and no NULL in a
// present NOT NULL column.
func (l layout) fits(types []uint64) bool {
	if len(types) < l.min || len(types) > len(l.Columns) {
		return false
	}
	for _, k := range l.key {
		if k.index < len(types) && !k.want(storageClass(types[k.index])) {
			return false
		}
	}
	for i, t := range types {
		c := l.Columns[i]
		if c.RowidKey && t != 0 {
			return false
		}
		if c.NotNull && !c.RowidKey && t == 0 {
			return false
		}
	}
	return true
}

// row turns a decoded record into column name → value. The rowid alias
// gets the rowid; a REAL column's integer is read back as a real, as
// SQLite does; a column the record does not reach (the row predates it)
// is left out, so it keeps its default.
func (l layout) row(rowid int64, vals []Value) map[string]Value {
	out := make(map[string]Value, len(vals))
	for i, v := range vals {
		c := l.Columns[i]
		switch {
		case c.RowidKey && v.Kind == Null:
			v = IntValue(rowid)
		case v.Kind == Integer && affinityOf(c.Type) == affReal:
			v = RealValue(float64(v.Int))
		}
		out[c.Name] = v
	}
	return out
}

// builtinDDL are the known Hermes layouts, as CREATE TABLE text: they are
// tried after any schema found in the WAL or a main file. Migrations only
// append columns, so v31's lists are v30's plus the new ones at the end.
var builtinDDL = []struct{ name, table, sql string }{
	{"hermes-v31", TableMessages, `CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT,
    effect_disposition TEXT, timestamp REAL NOT NULL, token_count INTEGER, finish_reason TEXT,
    reasoning TEXT, reasoning_content TEXT, reasoning_details TEXT, codex_reasoning_items TEXT,
    codex_message_items TEXT, platform_message_id TEXT, observed INTEGER DEFAULT 0,
    _compressed_summary INTEGER NOT NULL DEFAULT 0, active INTEGER NOT NULL DEFAULT 1,
    compacted INTEGER NOT NULL DEFAULT 0, api_content TEXT, display_kind TEXT,
    display_metadata TEXT, display_identity BLOB, display_order INTEGER,
    message_uid TEXT, absorbed_message_uids TEXT, tool_call_uids TEXT, tool_call_uid TEXT)`},
	// Hermes' sessions table as a fresh install creates it (about 60
	// columns in this order).
	{"hermes-upstream", TableSessions, `CREATE TABLE sessions (
    id TEXT PRIMARY KEY, source TEXT NOT NULL, user_id TEXT, session_key TEXT,
    chat_id TEXT, chat_type TEXT, thread_id TEXT, display_name TEXT, origin_json TEXT,
    expiry_finalized INTEGER DEFAULT 0, model TEXT, model_config TEXT, system_prompt TEXT,
    system_prompt_hash TEXT, parent_session_id TEXT, started_at REAL NOT NULL,
    ended_at REAL, end_reason TEXT, message_count INTEGER DEFAULT 0,
    tool_call_count INTEGER DEFAULT 0, input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0, cache_read_tokens INTEGER DEFAULT 0,
    cache_write_tokens INTEGER DEFAULT 0, reasoning_tokens INTEGER DEFAULT 0,
    cwd TEXT, git_branch TEXT, git_repo_root TEXT,
    git_metadata_generation INTEGER NOT NULL DEFAULT 0,
    billing_provider TEXT, billing_base_url TEXT, billing_mode TEXT,
    estimated_cost_usd REAL, actual_cost_usd REAL, cost_status TEXT, cost_source TEXT,
    pricing_version TEXT, title TEXT, title_source TEXT, last_activity_at REAL,
    last_activity_description TEXT, last_activity_provenance TEXT,
    api_call_count INTEGER DEFAULT 0, handoff_state TEXT, handoff_platform TEXT,
    handoff_error TEXT, compression_failure_cooldown_until REAL,
    compression_failure_error TEXT, compression_fallback_streak INTEGER NOT NULL DEFAULT 0,
    compression_ineffective_count INTEGER NOT NULL DEFAULT 0,
    compression_recovery_deadline REAL, profile_name TEXT, transport_profile TEXT,
    rewind_count INTEGER NOT NULL DEFAULT 0, archived INTEGER NOT NULL DEFAULT 0,
    pinned INTEGER NOT NULL DEFAULT 0, hidden INTEGER NOT NULL DEFAULT 0,
    last_read_at REAL, tool_names TEXT)`},
	// The reduced sessions table of stateguard's own test stores
	// (internal/hermestest), which leaves most of Hermes' columns out.
	{"stateguard-test-v31", TableSessions, `CREATE TABLE sessions (
    id TEXT PRIMARY KEY, source TEXT NOT NULL, user_id TEXT, model TEXT, model_config TEXT,
    system_prompt TEXT, parent_session_id TEXT, started_at REAL NOT NULL, ended_at REAL,
    end_reason TEXT, message_count INTEGER DEFAULT 0, tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0, output_tokens INTEGER DEFAULT 0, title TEXT,
    last_activity_at REAL, last_activity_description TEXT, last_activity_provenance TEXT,
    archived INTEGER NOT NULL DEFAULT 0, pinned INTEGER NOT NULL DEFAULT 0, profile_name TEXT,
    cost_usd REAL DEFAULT 0, auto_archived INTEGER NOT NULL DEFAULT 0)`},
}

// builtinLayouts parses builtinDDL; it is fixed text, so a failure is a
// bug caught by the tests.
func builtinLayouts() []layout {
	var out []layout
	for _, b := range builtinDDL {
		_, cols, _, err := parseCreateTable(b.sql)
		if err != nil {
			panic(fmt.Sprintf("walsalvage: built-in layout %s: %v", b.name, err))
		}
		l, err := newLayout(b.table, b.name, cols)
		if err != nil {
			panic(fmt.Sprintf("walsalvage: built-in layout %s: %v", b.name, err))
		}
		out = append(out, l)
	}
	return out
}
