package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Querier is what the read functions need: *sql.DB, *sql.Conn, *sql.Tx,
// *Writable and *Tx all have it.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// ErrNoSession means the session row does not exist.
var ErrNoSession = errors.New("no such session")

// maxVars is the most bound variables per statement: SQLite builds before
// 3.32 allow 999, and a store may be opened by any of them.
const maxVars = 999

// Message is one messages row. Every column a Hermes schema may have
// (v30, plus the v31 uid columns) has a field; which ones a store really
// has is probed with PRAGMA table_info on every read and write, never
// assumed. A field that is null (Valid false, nil slice) is left out of an
// insert, so the column's default applies and display_order's trigger
// fires. Columns this type does not know are kept in Extra.
type Message struct {
	ID                  int64 // 0 on append: SQLite assigns it
	SessionID           string
	Role                string
	Content             sql.NullString
	ToolCallID          sql.NullString
	ToolCalls           sql.NullString // JSON text
	ToolName            sql.NullString
	EffectDisposition   sql.NullString
	Timestamp           sql.NullFloat64
	TokenCount          sql.NullInt64
	FinishReason        sql.NullString
	Reasoning           sql.NullString
	ReasoningContent    sql.NullString
	ReasoningDetails    sql.NullString
	CodexReasoningItems sql.NullString
	CodexMessageItems   sql.NullString
	PlatformMessageID   sql.NullString
	Observed            sql.NullInt64
	CompressedSummary   sql.NullInt64 // _compressed_summary
	Active              sql.NullInt64
	Compacted           sql.NullInt64
	APIContent          sql.NullString
	DisplayKind         sql.NullString
	DisplayMetadata     sql.NullString // JSON text
	DisplayIdentity     []byte
	DisplayOrder        sql.NullInt64
	// v31
	MessageUID          sql.NullString
	AbsorbedMessageUIDs sql.NullString
	ToolCallUIDs        sql.NullString
	ToolCallUID         sql.NullString
	// Extra holds columns of the store this type has no field for, as the
	// driver returns them (int64, float64, string, []byte or nil). On
	// append, each is inserted when the column exists.
	Extra map[string]any
}

// fields maps column names to m's fields. id is handled by callers.
func (m *Message) fields() []field {
	return []field{
		{"session_id", &m.SessionID}, {"role", &m.Role}, {"content", &m.Content},
		{"tool_call_id", &m.ToolCallID}, {"tool_calls", &m.ToolCalls}, {"tool_name", &m.ToolName},
		{"effect_disposition", &m.EffectDisposition}, {"timestamp", &m.Timestamp},
		{"token_count", &m.TokenCount}, {"finish_reason", &m.FinishReason},
		{"reasoning", &m.Reasoning}, {"reasoning_content", &m.ReasoningContent},
		{"reasoning_details", &m.ReasoningDetails}, {"codex_reasoning_items", &m.CodexReasoningItems},
		{"codex_message_items", &m.CodexMessageItems}, {"platform_message_id", &m.PlatformMessageID},
		{"observed", &m.Observed}, {"_compressed_summary", &m.CompressedSummary},
		{"active", &m.Active}, {"compacted", &m.Compacted}, {"api_content", &m.APIContent},
		{"display_kind", &m.DisplayKind}, {"display_metadata", &m.DisplayMetadata},
		{"display_identity", &m.DisplayIdentity}, {"display_order", &m.DisplayOrder},
		{"message_uid", &m.MessageUID}, {"absorbed_message_uids", &m.AbsorbedMessageUIDs},
		{"tool_call_uids", &m.ToolCallUIDs}, {"tool_call_uid", &m.ToolCallUID},
	}
}

// ToolCallCount is how many tool calls the message carries, as Hermes
// counts them for sessions.tool_call_count: the length of the tool_calls
// JSON list, 1 for another JSON value, 0 for none or text that is not JSON.
func (m *Message) ToolCallCount() int {
	if !m.ToolCalls.Valid || strings.TrimSpace(m.ToolCalls.String) == "" {
		return 0
	}
	var v any
	if err := json.Unmarshal([]byte(m.ToolCalls.String), &v); err != nil {
		return 0
	}
	switch x := v.(type) {
	case nil:
		return 0
	case []any:
		return len(x)
	}
	return 1
}

// Session is the sessions row with the columns docs/hermes.md lists (and
// v31's auto_archived). The about 60 other columns are never read or
// written: a created session leaves them to their defaults.
type Session struct {
	ID                      string
	Source                  string
	UserID                  sql.NullString
	Model                   sql.NullString
	ModelConfig             sql.NullString
	ParentSessionID         sql.NullString
	StartedAt               sql.NullFloat64
	EndedAt                 sql.NullFloat64
	EndReason               sql.NullString
	MessageCount            sql.NullInt64
	ToolCallCount           sql.NullInt64
	Title                   sql.NullString
	LastActivityAt          sql.NullFloat64
	LastActivityDescription sql.NullString
	LastActivityProvenance  sql.NullString
	Archived                sql.NullInt64
	ProfileName             sql.NullString
	AutoArchived            sql.NullInt64 // v31
}

func (s *Session) fields() []field {
	return []field{
		{"id", &s.ID}, {"source", &s.Source}, {"user_id", &s.UserID}, {"model", &s.Model},
		{"model_config", &s.ModelConfig}, {"parent_session_id", &s.ParentSessionID},
		{"started_at", &s.StartedAt}, {"ended_at", &s.EndedAt}, {"end_reason", &s.EndReason},
		{"message_count", &s.MessageCount}, {"tool_call_count", &s.ToolCallCount},
		{"title", &s.Title}, {"last_activity_at", &s.LastActivityAt},
		{"last_activity_description", &s.LastActivityDescription},
		{"last_activity_provenance", &s.LastActivityProvenance}, {"archived", &s.Archived},
		{"profile_name", &s.ProfileName}, {"auto_archived", &s.AutoArchived},
	}
}

// ReadMessages returns the session's messages in id order, every row
// (active or not), with every column the store has.
func ReadMessages(ctx context.Context, q Querier, sessionID string) ([]Message, error) {
	cols, err := columnsOf(ctx, q, "messages")
	if err != nil {
		return nil, err
	}
	return queryMessages(ctx, q, cols, "WHERE session_id = ? ORDER BY id", sessionID)
}

// ReadMessagesByID returns the rows with the given ids that exist, in id
// order. The ids are looked up in chunks of at most 999 bound variables.
func ReadMessagesByID(ctx context.Context, q Querier, ids []int64) ([]Message, error) {
	cols, err := columnsOf(ctx, q, "messages")
	if err != nil {
		return nil, err
	}
	var out []Message
	for start := 0; start < len(ids); start += maxVars {
		chunk := ids[start:min(start+maxVars, len(ids))]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		ms, err := queryMessages(ctx, q, cols, "WHERE id IN ("+placeholders(len(chunk))+")", args...)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	sortByID(out)
	return out, nil
}

// ExistingMessageIDs returns which of ids exist in messages, in chunks of
// at most 999 bound variables.
func ExistingMessageIDs(ctx context.Context, q Querier, ids []int64) (map[int64]bool, error) {
	found := make(map[int64]bool)
	for start := 0; start < len(ids); start += maxVars {
		chunk := ids[start:min(start+maxVars, len(ids))]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := q.QueryContext(ctx, "SELECT id FROM messages WHERE id IN ("+placeholders(len(chunk))+")", args...)
		if err != nil {
			return nil, fmt.Errorf("look up message ids: %w", err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			found[id] = true
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return found, nil
}

func sortByID(ms []Message) {
	slices.SortFunc(ms, func(a, b Message) int { return cmp.Compare(a.ID, b.ID) })
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

func queryMessages(ctx context.Context, q Querier, cols []string, where string, args ...any) ([]Message, error) {
	query := "SELECT " + quoteColumns(cols) + " FROM messages " + where
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read messages: %w", err)
	}
	defer rows.Close()
	var out []Message
	raw := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("read messages: %w", err)
		}
		var m Message
		known := fieldMap(m.fields())
		for i, c := range cols {
			if c == "id" {
				id, _ := asInt(raw[i])
				m.ID = id
				continue
			}
			if f, ok := known[c]; ok {
				if err := assign(f, raw[i]); err != nil {
					return nil, fmt.Errorf("read messages: column %s of row %d: %w", c, m.ID, err)
				}
				continue
			}
			if m.Extra == nil {
				m.Extra = map[string]any{}
			}
			m.Extra[c] = raw[i]
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read messages: %w", err)
	}
	return out, nil
}

// SessionExists reports whether the session row exists.
func SessionExists(ctx context.Context, q Querier, id string) (bool, error) {
	rows, err := q.QueryContext(ctx, "SELECT 1 FROM sessions WHERE id = ?", id)
	if err != nil {
		return false, fmt.Errorf("look up session %s: %w", id, err)
	}
	defer rows.Close()
	ok := rows.Next()
	return ok, rows.Err()
}

// ReadSession returns the session's row; ErrNoSession when it is missing.
func ReadSession(ctx context.Context, q Querier, id string) (Session, error) {
	have, err := columnsOf(ctx, q, "sessions")
	if err != nil {
		return Session{}, err
	}
	var s Session
	var cols []string
	var dst []field
	for _, f := range s.fields() {
		if contains(have, f.name) {
			cols = append(cols, f.name)
			dst = append(dst, f)
		}
	}
	rows, err := q.QueryContext(ctx, "SELECT "+quoteColumns(cols)+" FROM sessions WHERE id = ?", id)
	if err != nil {
		return Session{}, fmt.Errorf("read session %s: %w", id, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Session{}, fmt.Errorf("read session %s: %w", id, err)
		}
		return Session{}, fmt.Errorf("session %s: %w", id, ErrNoSession)
	}
	raw := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return Session{}, fmt.Errorf("read session %s: %w", id, err)
	}
	for i, f := range dst {
		if err := assign(f, raw[i]); err != nil {
			return Session{}, fmt.Errorf("read session %s: column %s: %w", id, f.name, err)
		}
	}
	return s, rows.Err()
}

// ErrNoTable: a table Hermes' schema has is not in the store. A store
// whose schema lived only in a -wal that was lost (a sidecar_lost
// incident) has none until Hermes' next start creates it again.
var ErrNoTable = errors.New("no such table")

// columnsOf lists a table's columns with PRAGMA table_info.
func columnsOf(ctx context.Context, q Querier, table string) ([]string, error) {
	rows, err := q.QueryContext(ctx, "SELECT name FROM pragma_table_info(?) ORDER BY cid", table)
	if err != nil {
		return nil, fmt.Errorf("probe columns of %s: %w", table, err)
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, fmt.Errorf("probe columns of %s: %w", table, err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("probe columns of %s: %w", table, err)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("probe columns of %s: %w (is this a Hermes store? a Hermes store whose -wal was lost may have no schema until Hermes creates it again)", table, ErrNoTable)
	}
	return cols, nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func quoteColumns(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = `"` + strings.ReplaceAll(c, `"`, `""`) + `"`
	}
	return strings.Join(q, ", ")
}
