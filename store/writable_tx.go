package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"
)

// Tx is one write transaction of a Writable, open for the duration of the
// function given to InTx. It is a Querier, so the read functions work
// inside it and see its own writes.
type Tx struct {
	ctx  context.Context
	tx   *sql.Tx
	path string

	msgCols  []string
	sessCols []string
	stmts    map[string]*sql.Stmt
}

// Context is the context InTx was called with.
func (t *Tx) Context() context.Context { return t.ctx }

// QueryContext reads inside the transaction.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, query, args...)
}

// ExecContext writes inside the transaction.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, query, args...)
}

func (t *Tx) closeStmts() {
	for _, s := range t.stmts {
		s.Close()
	}
	t.stmts = nil
}

// stmt prepares query once per transaction: a replay appends thousands of
// rows of the same shape.
func (t *Tx) stmt(query string) (*sql.Stmt, error) {
	if s, ok := t.stmts[query]; ok {
		return s, nil
	}
	s, err := t.tx.PrepareContext(t.ctx, query)
	if err != nil {
		return nil, err
	}
	if t.stmts == nil {
		t.stmts = map[string]*sql.Stmt{}
	}
	t.stmts[query] = s
	return s, nil
}

// CreateSession inserts a sessions row with the fields of s that are set
// and leaves every other column to its default. ID and Source are
// required; a StartedAt that is not set becomes now.
func (t *Tx) CreateSession(s Session) error {
	if s.ID == "" || s.Source == "" {
		return fmt.Errorf("create session in %s: id and source are required", t.path)
	}
	if !s.StartedAt.Valid {
		s.StartedAt = sql.NullFloat64{Float64: float64(time.Now().UnixNano()) / 1e9, Valid: true}
	}
	if t.sessCols == nil {
		cols, err := columnsOf(t.ctx, t.tx, "sessions")
		if err != nil {
			return err
		}
		t.sessCols = cols
	}
	var cols []string
	var args []any
	for _, f := range s.fields() {
		v, ok := f.value()
		if !ok {
			continue
		}
		if !contains(t.sessCols, f.name) {
			return fmt.Errorf("create session %s in %s: the store's sessions table has no column %s", s.ID, t.path, f.name)
		}
		cols = append(cols, f.name)
		args = append(args, v)
	}
	q := "INSERT INTO sessions (" + quoteColumns(cols) + ") VALUES (" + placeholders(len(cols)) + ")"
	if _, err := t.tx.ExecContext(t.ctx, q, args...); err != nil {
		return fmt.Errorf("create session %s in %s: %w", s.ID, t.path, err)
	}
	return nil
}

// AppendMessage inserts m with every field that is set (so the FTS5 and
// display_order triggers see the whole row) and bumps the session's
// message_count by 1 and tool_call_count by m.ToolCallCount(), as Hermes'
// append does. A set field whose column the store lacks is an error, not
// silently dropped, except display_identity (see DisplayIdentity), which
// a store from before that column simply does not get. It returns the new
// row's id.
func (t *Tx) AppendMessage(m Message) (int64, error) {
	if m.SessionID == "" || m.Role == "" {
		return 0, fmt.Errorf("append message to %s: session id and role are required", t.path)
	}
	if t.msgCols == nil {
		cols, err := columnsOf(t.ctx, t.tx, "messages")
		if err != nil {
			return 0, err
		}
		t.msgCols = cols
	}
	var cols []string
	var args []any
	if m.ID != 0 {
		cols, args = append(cols, "id"), append(args, m.ID)
	}
	fs := m.fields()
	for _, f := range fs {
		v, ok := f.value()
		if !ok {
			continue
		}
		if !contains(t.msgCols, f.name) {
			if f.name == "display_identity" {
				continue // a store from before the column: Hermes writes none there either
			}
			return 0, fmt.Errorf("append message to %s: the store's messages table has no column %s (older schema?); clear the field to append without it", t.path, f.name)
		}
		cols = append(cols, f.name)
		args = append(args, v)
	}
	if len(m.Extra) > 0 {
		known := fieldMap(fs)
		keys := make([]string, 0, len(m.Extra))
		for k := range m.Extra {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if _, dup := known[k]; dup || k == "id" {
				return 0, fmt.Errorf("append message to %s: Extra column %s shadows a field", t.path, k)
			}
			if !contains(t.msgCols, k) {
				return 0, fmt.Errorf("append message to %s: the store's messages table has no column %s", t.path, k)
			}
			cols = append(cols, k)
			args = append(args, m.Extra[k])
		}
	}
	ins, err := t.stmt("INSERT INTO messages (" + quoteColumns(cols) + ") VALUES (" + placeholders(len(cols)) + ")")
	if err != nil {
		return 0, fmt.Errorf("append message to %s: %w", t.path, err)
	}
	res, err := ins.ExecContext(t.ctx, args...)
	if err != nil {
		return 0, fmt.Errorf("append message to session %s in %s: %w", m.SessionID, t.path, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("append message to %s: %w", t.path, err)
	}
	// The counters move as Hermes' _bump_session_counters moves them,
	// statement for statement (a NULL counter stays NULL).
	q, args := `UPDATE sessions SET message_count = message_count + 1 WHERE id = ?`, []any{m.SessionID}
	if n := m.ToolCallCount(); n > 0 {
		q, args = `UPDATE sessions SET message_count = message_count + 1, tool_call_count = tool_call_count + ? WHERE id = ?`, []any{n, m.SessionID}
	}
	bump, err := t.stmt(q)
	if err != nil {
		return 0, fmt.Errorf("append message to %s: %w", t.path, err)
	}
	res, err = bump.ExecContext(t.ctx, args...)
	if err != nil {
		return 0, fmt.Errorf("bump counters of session %s in %s: %w", m.SessionID, t.path, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return 0, fmt.Errorf("append message to %s: session %s: %w", t.path, m.SessionID, ErrNoSession)
	}
	return id, nil
}
