package store

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"time"
)

// Liveness is what a Hermes store says about the processes working on it:
// its gateways' heartbeats and the turn leases of sessions in progress,
// read in one snapshot (hermes-compat: liveness signals).
type Liveness struct {
	// HasGateways and HasLeases say whether the store has the tables at
	// all (older schemas do not).
	HasGateways, HasLeases bool
	Gateways               []Gateway
	Leases                 []TurnLease
}

// Gateway is one row of gateway_heartbeats.
type Gateway struct {
	BackendID string
	PID       int // 0 when NULL or not a pid
	Host      string
	Heartbeat time.Time // zero when NULL
}

// TurnLease is one row of session_turn_leases with the signals that move
// while its turn runs; a zero time is a NULL (or a session without rows).
type TurnLease struct {
	ConversationID string
	Holder         string // "…pid=<n>…", see HolderPID
	AcquiredAt     time.Time
	ExpiresAt      time.Time
	LastActivity   time.Time // sessions.last_activity_at
	NewestMessage  time.Time // the session's newest messages.timestamp
}

// ReadLiveness reads the store at path read-only, in one read transaction
// so heartbeats and leases come from the same snapshot.
func ReadLiveness(ctx context.Context, path string) (Liveness, error) {
	lv, err := readLiveness(ctx, path, func() (*sql.DB, error) { return OpenReadOnly(path) })
	return lv, Explain(path, err)
}

// ReadLiveness is ReadLiveness of the store, opened through its
// directory's handle (OpenReadOnly): the agent's stall check reads a
// profile's store this way, so a directory swapped for a symlink since
// discovery is refused, not read.
func (s Store) ReadLiveness(ctx context.Context) (Liveness, error) {
	lv, err := readLiveness(ctx, s.Path, s.OpenReadOnly)
	return lv, Explain(s.Path, err)
}

func readLiveness(ctx context.Context, path string, open func() (*sql.DB, error)) (Liveness, error) {
	var lv Liveness
	db, err := open()
	if err != nil {
		return lv, fmt.Errorf("read liveness: %w", err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return lv, fmt.Errorf("read liveness of %s: begin: %w", path, err)
	}
	defer tx.Rollback()
	tables, err := livenessTables(ctx, tx)
	if err != nil {
		return lv, fmt.Errorf("read liveness of %s: %w", path, err)
	}
	lv.HasGateways, lv.HasLeases = tables["gateway_heartbeats"], tables["session_turn_leases"]
	if lv.HasGateways {
		if lv.Gateways, err = readGateways(ctx, tx); err != nil {
			return lv, fmt.Errorf("read liveness of %s: %w", path, err)
		}
	}
	if lv.HasLeases {
		if lv.Leases, err = readLeases(ctx, tx, tables); err != nil {
			return lv, fmt.Errorf("read liveness of %s: %w", path, err)
		}
	}
	return lv, nil
}

func livenessTables(ctx context.Context, tx *sql.Tx) (map[string]bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table'
		AND name IN ('gateway_heartbeats', 'session_turn_leases', 'sessions', 'messages')`)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	defer rows.Close()
	t := make(map[string]bool)
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("list tables: %w", err)
		}
		t[name] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	return t, nil
}

func readGateways(ctx context.Context, tx *sql.Tx) ([]Gateway, error) {
	rows, err := tx.QueryContext(ctx, `SELECT backend_id, pid, host, last_heartbeat FROM gateway_heartbeats`)
	if err != nil {
		return nil, fmt.Errorf("read gateway_heartbeats: %w", err)
	}
	defer rows.Close()
	var out []Gateway
	for rows.Next() {
		var (
			id   sql.NullString
			pid  sql.NullInt64
			host sql.NullString
			hb   sql.NullFloat64
		)
		if err := rows.Scan(&id, &pid, &host, &hb); err != nil {
			return nil, fmt.Errorf("read gateway_heartbeats: %w", err)
		}
		g := Gateway{BackendID: id.String, Host: host.String, Heartbeat: unixSeconds(hb)}
		if pid.Valid && pid.Int64 > 0 && pid.Int64 <= math.MaxInt32 {
			g.PID = int(pid.Int64)
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read gateway_heartbeats: %w", err)
	}
	return out, nil
}

func readLeases(ctx context.Context, tx *sql.Tx, tables map[string]bool) ([]TurnLease, error) {
	lastActivity, newestMessage := "NULL", "NULL"
	if tables["sessions"] {
		lastActivity = `(SELECT s.last_activity_at FROM sessions s WHERE s.id = l.conversation_id)`
	}
	if tables["messages"] {
		newestMessage = `(SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = l.conversation_id)`
	}
	rows, err := tx.QueryContext(ctx, `SELECT l.conversation_id, l.holder, l.acquired_at, l.expires_at, `+
		lastActivity+`, `+newestMessage+` FROM session_turn_leases l`)
	if err != nil {
		return nil, fmt.Errorf("read session_turn_leases: %w", err)
	}
	defer rows.Close()
	var out []TurnLease
	for rows.Next() {
		var (
			id, holder                   sql.NullString
			acquired, expires, act, msgT sql.NullFloat64
		)
		if err := rows.Scan(&id, &holder, &acquired, &expires, &act, &msgT); err != nil {
			return nil, fmt.Errorf("read session_turn_leases: %w", err)
		}
		out = append(out, TurnLease{ConversationID: id.String, Holder: holder.String, AcquiredAt: unixSeconds(acquired),
			ExpiresAt: unixSeconds(expires), LastActivity: unixSeconds(act), NewestMessage: unixSeconds(msgT)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read session_turn_leases: %w", err)
	}
	return out, nil
}

var holderPIDRE = regexp.MustCompile(`(?:^|[^A-Za-z0-9_])pid=(\d+)`)

// HolderPID extracts the pid=<n> a Hermes lease holder string carries; 0
// when it has none.
func HolderPID(holder string) int {
	m := holderPIDRE.FindStringSubmatch(holder)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// unixSeconds converts Hermes' REAL Unix seconds; NULL, NaN, infinities
// and non-positive values are the zero time.
func unixSeconds(f sql.NullFloat64) time.Time {
	if !f.Valid || math.IsNaN(f.Float64) || math.IsInf(f.Float64, 0) || f.Float64 <= 0 {
		return time.Time{}
	}
	sec, frac := math.Modf(f.Float64)
	return time.Unix(int64(sec), int64(frac*1e9))
}
