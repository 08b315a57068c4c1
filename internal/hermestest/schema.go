package hermestest

import (
	"database/sql"
	"fmt"
	"os"
	"strings"

	_ "modernc.org/sqlite" // the only SQLite in the binary
)

// SchemaVersion is the Hermes schema version the fixture DDL reproduces.
const SchemaVersion = 30

// SchemaV30 is the part of the Hermes schema (version 30) that stateguard
// touches, with the real FTS5 external-content tables and triggers. The
// sessions table carries a few of Hermes' other columns with defaults so a
// writer that leaves them alone is exercised, as it is against a real store.
const SchemaV30 = `
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS state_meta (key TEXT PRIMARY KEY, value TEXT);

CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    user_id TEXT,
    model TEXT,
    model_config TEXT,
    system_prompt TEXT,
    parent_session_id TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT,
    message_count INTEGER DEFAULT 0,
    tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0,
    title TEXT,
    last_activity_at REAL,
    last_activity_description TEXT,
    last_activity_provenance TEXT,
    archived INTEGER NOT NULL DEFAULT 0,
    pinned INTEGER NOT NULL DEFAULT 0,
    profile_name TEXT,
    cost_usd REAL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL,
    content TEXT,
    tool_call_id TEXT,
    tool_calls TEXT,
    tool_name TEXT,
    effect_disposition TEXT,
    timestamp REAL NOT NULL,
    token_count INTEGER,
    finish_reason TEXT,
    reasoning TEXT,
    reasoning_content TEXT,
    reasoning_details TEXT,
    codex_reasoning_items TEXT,
    codex_message_items TEXT,
    platform_message_id TEXT,
    observed INTEGER DEFAULT 0,
    _compressed_summary INTEGER NOT NULL DEFAULT 0,
    active INTEGER NOT NULL DEFAULT 1,
    compacted INTEGER NOT NULL DEFAULT 0,
    api_content TEXT,
    display_kind TEXT,
    display_metadata TEXT,
    display_identity BLOB,
    display_order INTEGER
);
CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, timestamp);

CREATE TABLE IF NOT EXISTS gateway_heartbeats (
    backend_id TEXT PRIMARY KEY,
    pid INTEGER,
    started_at REAL,
    last_heartbeat REAL,
    profile TEXT,
    host TEXT
);
CREATE TABLE IF NOT EXISTS session_turn_leases (
    conversation_id TEXT PRIMARY KEY,
    holder TEXT,
    acquired_at REAL,
    expires_at REAL
);
CREATE TABLE IF NOT EXISTS compression_locks (
    session_id TEXT PRIMARY KEY,
    holder TEXT,
    acquired_at REAL,
    expires_at REAL
);

CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content, tool_name, tool_calls,
    content='messages', content_rowid='id'
);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5(
    content,
    content='messages', content_rowid='id',
    tokenize='trigram'
);

CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (new.id,
            CASE WHEN new.role = 'tool' THEN substr(new.content, 1, 8192) ELSE new.content END,
            new.tool_name, new.tool_calls);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id,
            CASE WHEN old.role = 'tool' THEN substr(old.content, 1, 8192) ELSE old.content END,
            old.tool_name, old.tool_calls);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_insert AFTER INSERT ON messages
WHEN new.role != 'tool'
 AND COALESCE((SELECT source FROM sessions WHERE id = new.session_id), '') NOT IN ('cron', 'subagent')
BEGIN
    INSERT INTO messages_fts_trigram(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_delete AFTER DELETE ON messages
WHEN old.role != 'tool'
 AND COALESCE((SELECT source FROM sessions WHERE id = old.session_id), '') NOT IN ('cron', 'subagent')
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content)
    VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER IF NOT EXISTS messages_display_order AFTER INSERT ON messages
WHEN new.display_order IS NULL
BEGIN
    UPDATE messages SET display_order = new.id WHERE id = new.id;
END;
`

// SchemaV31Extra turns a v30 store into the v31 shape (new uid columns),
// for probes that must read columns with PRAGMA table_info.
const SchemaV31Extra = `
ALTER TABLE sessions ADD COLUMN auto_archived INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN message_uid TEXT;
ALTER TABLE messages ADD COLUMN absorbed_message_uids TEXT;
ALTER TABLE messages ADD COLUMN tool_call_uids TEXT;
ALTER TABLE messages ADD COLUMN tool_call_uid TEXT;
UPDATE schema_version SET version = 31;
`

// Pragmas are the connection settings Hermes uses for its writers.
var Pragmas = []string{
	"PRAGMA journal_mode=WAL",
	"PRAGMA busy_timeout=1000",
	"PRAGMA journal_size_limit=67108864",
	"PRAGMA foreign_keys=ON",
}

// DSN is the modernc DSN for a Hermes-style writable connection.
func DSN(path string) string {
	var b strings.Builder
	b.WriteString("file:")
	b.WriteString(path)
	b.WriteString("?_pragma=busy_timeout(1000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=journal_size_limit(67108864)")
	return b.String()
}

// Generation is the application_id stamped into fixture stores, standing
// in for the u32 Hermes derives from state_meta.db_file_generation.
const Generation = 0x5347a7e1

// CreateStore makes a Hermes v30 store at path in WAL mode, with its
// state_meta generation stamp and application_id, and closes it. The store
// is left without -wal/-shm (closed cleanly), mode 0600.
func CreateStore(path string) error {
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := InitSchema(db); err != nil {
		return fmt.Errorf("init schema %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	return nil
}

// InitSchema creates the v30 tables, FTS5 tables and triggers on db if they
// are missing, and stamps schema_version, state_meta and application_id.
func InitSchema(db *sql.DB) error {
	if _, err := db.Exec(SchemaV30); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	stmts := []string{
		fmt.Sprintf("INSERT INTO schema_version(version) SELECT %d WHERE NOT EXISTS (SELECT 1 FROM schema_version)", SchemaVersion),
		fmt.Sprintf("INSERT OR IGNORE INTO state_meta(key, value) VALUES ('db_file_generation', '%08x00000000000000000000000000000000')", Generation),
		fmt.Sprintf("PRAGMA application_id=%d", int32(Generation)),
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}
