package recovery

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/stateguard/stateguard/store"
)

// Export is one session with all its messages, every column of every row
// as the store holds it, so nothing is lost between the store and the
// export (the JSON form round-trips).
type Export struct {
	// Source names where it was read: a store's path or a capture's
	// directory; md and html show it.
	Source    string
	SessionID string
	// Session is the sessions row; nil when the store has messages of the
	// session but no row for it (a partial capture).
	Session *Row
	// Messages are every row of the session (active or not), in id order.
	Messages []Row
	// Redacted says Redact ran.
	Redacted bool
}

// Row is one table row: its columns in table order and their values as
// the driver returns them: nil, int64, float64, string or []byte.
type Row struct {
	Cols []string
	Vals []any
}

// Get returns the value of col.
func (r Row) Get(col string) (any, bool) {
	for i, c := range r.Cols {
		if c == col {
			return r.Vals[i], true
		}
	}
	return nil, false
}

// Text returns col as text, and whether it is text at all.
func (r Row) Text(col string) (string, bool) {
	switch v, _ := r.Get(col); x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	}
	return "", false
}

// Float returns col as a number, and whether it is one.
func (r Row) Float(col string) (float64, bool) {
	switch v, _ := r.Get(col); x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	}
	return 0, false
}

// Int returns col as an integer, and whether it is one.
func (r Row) Int(col string) (int64, bool) {
	switch v, _ := r.Get(col); x := v.(type) {
	case int64:
		return x, true
	case float64:
		return int64(x), x == float64(int64(x))
	}
	return 0, false
}

// ReadExport reads the session's row and all its messages from q, in one
// read transaction when q can begin one.
func ReadExport(ctx context.Context, q store.Querier, sessionID string) (*Export, error) {
	x := &Export{SessionID: sessionID}
	sess, err := queryRows(ctx, q, "SELECT * FROM sessions WHERE id = ?", sessionID)
	if err != nil {
		return nil, fmt.Errorf("export: read session %s: %w", sessionID, err)
	}
	if len(sess) > 0 {
		x.Session = &sess[0]
	}
	if x.Messages, err = queryRows(ctx, q, "SELECT * FROM messages WHERE session_id = ? ORDER BY id", sessionID); err != nil {
		return nil, fmt.Errorf("export: read messages of %s: %w", sessionID, err)
	}
	if x.Session == nil && len(x.Messages) == 0 {
		return nil, fmt.Errorf("export: session %s: %w (ids are matched exactly)", sessionID, store.ErrNoSession)
	}
	return x, nil
}

func queryRows(ctx context.Context, q store.Querier, query string, args ...any) ([]Row, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []Row
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		for i, v := range vals {
			if t, ok := v.(time.Time); ok {
				// A column declared DATE/TIME comes back parsed; keep
				// the text SQLite holds.
				vals[i] = t.Format(time.RFC3339Nano)
			}
		}
		out = append(out, Row{Cols: cols, Vals: vals})
	}
	return out, rows.Err()
}

// ExportFrom reads a session from the store s, read-only, opened through
// its directory's handle (store.Store.OpenReadOnly: no symlink, the
// directory s records).
func ExportFrom(ctx context.Context, s store.Store, sessionID string) (*Export, error) {
	dbPath := s.Path
	db, err := s.OpenReadOnly()
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, store.Explain(dbPath, fmt.Errorf("export: open %s: %w", dbPath, err))
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true}) // one snapshot
	if err != nil {
		return nil, store.Explain(dbPath, fmt.Errorf("export: read %s: %w", dbPath, err))
	}
	defer tx.Rollback()
	x, err := ReadExport(ctx, tx, sessionID)
	if err != nil {
		return nil, store.Explain(dbPath, fmt.Errorf("read %s: %w", dbPath, err))
	}
	x.Source = dbPath
	return x, nil
}
