package recovery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stateguard/stateguard/internal/pyjson"
	"github.com/stateguard/stateguard/store"
)

// sessionDiff is what one session of the capture has that the healthy
// store does not.
type sessionDiff struct {
	sid        string
	newSession bool
	session    *store.Session // the capture's row, when newSession
	// replay and pre hold the missing rows in capture id order, with
	// their rendered lines; pre only for KindReplaced.
	replay, pre  []divertRow
	unreplayable int
	captureRows  int
	healthyRows  int
}

type divertRow struct {
	id   int64
	line pyjson.Value
}

// diffCapture compares every session the capture has messages in with the
// same session of the healthy store. A capture row is present when the
// healthy session has a row of the same identity (keyOf) not already
// matched to an earlier capture row: two equal rows in the capture and one
// in the store leave one missing. Rows other diverts queued (queued, by
// session) count as the store's. cut splits the missing rows into replay
// and pre (replayCut.pre).
func diffCapture(ctx context.Context, capQ, healthyQ store.Querier, cut replayCut, queued map[string][]store.Message) ([]sessionDiff, error) {
	sids, err := captureSessions(ctx, capQ)
	if err != nil {
		return nil, err
	}
	// A store whose schema lived only in a -wal that was lost has no
	// tables now: every capture row is missing from it, and the replay
	// waits until Hermes creates the schema again.
	have, err := tablesIn(ctx, healthyQ)
	if err != nil {
		return nil, fmt.Errorf("healthy store: %w", err)
	}
	noSchema := !have["sessions"] || !have["messages"]
	var sessCols map[string]bool
	if !noSchema {
		if sessCols, err = tableColumns(ctx, healthyQ, "sessions"); err != nil {
			return nil, fmt.Errorf("healthy store: %w", err)
		}
	}
	var out []sessionDiff
	for _, sid := range sids {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d := sessionDiff{sid: sid}
		capRows, err := store.ReadMessages(ctx, capQ, sid)
		if err != nil {
			return nil, fmt.Errorf("capture: session %s: %w", sid, err)
		}
		exists := false
		if !noSchema {
			if exists, err = store.SessionExists(ctx, healthyQ, sid); err != nil {
				return nil, fmt.Errorf("healthy store: %w", err)
			}
		}
		var healthy []store.Message
		if exists {
			if healthy, err = store.ReadMessages(ctx, healthyQ, sid); err != nil {
				return nil, fmt.Errorf("healthy store: session %s: %w", sid, err)
			}
		} else {
			d.newSession = true
			s, err := store.ReadSession(ctx, capQ, sid)
			switch {
			case errors.Is(err, store.ErrNoSession):
				// A store without the foreign key can hold messages of
				// no session; the replay creates it as Hermes does.
			case err != nil:
				return nil, fmt.Errorf("capture: %w", err)
			default:
				if sessCols != nil {
					pruneSession(&s, sessCols)
				}
				d.session = &s
			}
		}
		d.missing(capRows, healthy, queued[sid], cut)
		out = append(out, d)
	}
	return out, nil
}

// missing fills d with the capture rows the healthy session lacks (see
// diffCapture), rendered as diverted lines. queued are rows other diverts
// are about to replay into the session.
func (d *sessionDiff) missing(capRows, healthy, queued []store.Message, cut replayCut) {
	d.captureRows, d.healthyRows = len(capRows), len(healthy)
	have := make(map[rowKey]int, len(healthy)+len(queued))
	for i := range healthy {
		have[keyOf(&healthy[i])]++
	}
	for i := range queued {
		have[keyOf(&queued[i])]++
	}
	for i := range capRows {
		m := &capRows[i]
		k := keyOf(m)
		if have[k] > 0 {
			have[k]--
			continue
		}
		line, ok := divertLine(m)
		if !ok {
			d.unreplayable++
			continue
		}
		row := divertRow{id: m.ID, line: line}
		if cut.pre(m, k) {
			d.pre = append(d.pre, row)
			continue
		}
		d.replay = append(d.replay, row)
	}
}

// captureSessions lists the sessions with messages in the capture, in the
// order their first message was written. A capture with no schema at all
// (an empty database a stray opener created, the orphan of a restore that
// renamed over it) holds no sessions; one with tables but no messages is
// not a Hermes capture.
func captureSessions(ctx context.Context, q store.Querier) ([]string, error) {
	if empty, err := schemaless(ctx, q); err != nil || empty {
		return nil, err
	}
	// Hermes creates its tables one statement at a time, messages after
	// schema_version, state_meta and sessions: an orphan caught in
	// between (a writer creating the schema of a store that had lost it)
	// holds no message.
	have, err := tablesIn(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	if !have["messages"] && (have["sessions"] || have["schema_version"] || have["state_meta"]) {
		return nil, nil
	}
	rows, err := q.QueryContext(ctx, "SELECT session_id FROM messages GROUP BY session_id ORDER BY min(id)")
	if err != nil {
		return nil, fmt.Errorf("capture: list sessions: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var sid sql.NullString
		if err := rows.Scan(&sid); err != nil {
			return nil, fmt.Errorf("capture: list sessions: %w", err)
		}
		if sid.Valid {
			out = append(out, sid.String)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("capture: list sessions: %w", err)
	}
	return out, nil
}

// tablesIn lists the database's tables.
func tablesIn(ctx context.Context, q store.Querier) (map[string]bool, error) {
	rows, err := q.QueryContext(ctx, "SELECT name FROM sqlite_master WHERE type = 'table'")
	if err != nil {
		return nil, fmt.Errorf("read schema: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("read schema: %w", err)
		}
		out[n] = true
	}
	return out, rows.Err()
}

// schemaless reports whether the database has no schema object at all.
func schemaless(ctx context.Context, q store.Querier) (bool, error) {
	rows, err := q.QueryContext(ctx, "SELECT 1 FROM sqlite_master LIMIT 1")
	if err != nil {
		return false, fmt.Errorf("capture: read schema: %w", err)
	}
	defer rows.Close()
	any := rows.Next()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("capture: read schema: %w", err)
	}
	return !any, nil
}

func tableColumns(ctx context.Context, q store.Querier, table string) (map[string]bool, error) {
	rows, err := q.QueryContext(ctx, "SELECT name FROM pragma_table_info(?)", table)
	if err != nil {
		return nil, fmt.Errorf("probe columns of %s: %w", table, err)
	}
	defer rows.Close()
	cols := map[string]bool{}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, fmt.Errorf("probe columns of %s: %w", table, err)
		}
		cols[c] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("probe columns of %s: %w", table, err)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("probe columns of %s: no such table (is this a Hermes store?)", table)
	}
	return cols, nil
}

// pruneSession clears the optional columns the healthy store's sessions
// table does not have (a v31 capture replayed into a v30 store), so
// creating the session does not fail on them. Hermes migrations only add
// columns, so what the store has now it still has at replay time.
func pruneSession(s *store.Session, have map[string]bool) {
	for col, clear := range map[string]func(){
		"user_id":                   func() { s.UserID = sql.NullString{} },
		"model":                     func() { s.Model = sql.NullString{} },
		"model_config":              func() { s.ModelConfig = sql.NullString{} },
		"parent_session_id":         func() { s.ParentSessionID = sql.NullString{} },
		"ended_at":                  func() { s.EndedAt = sql.NullFloat64{} },
		"end_reason":                func() { s.EndReason = sql.NullString{} },
		"message_count":             func() { s.MessageCount = sql.NullInt64{} },
		"tool_call_count":           func() { s.ToolCallCount = sql.NullInt64{} },
		"title":                     func() { s.Title = sql.NullString{} },
		"last_activity_at":          func() { s.LastActivityAt = sql.NullFloat64{} },
		"last_activity_description": func() { s.LastActivityDescription = sql.NullString{} },
		"last_activity_provenance":  func() { s.LastActivityProvenance = sql.NullString{} },
		"archived":                  func() { s.Archived = sql.NullInt64{} },
		"profile_name":              func() { s.ProfileName = sql.NullString{} },
		"auto_archived":             func() { s.AutoArchived = sql.NullInt64{} },
	} {
		if !have[col] {
			clear()
		}
	}
}
