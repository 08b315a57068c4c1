package recovery

import (
	"context"
	"fmt"
	"strings"

	"github.com/stateguard/stateguard/store"
)

// maxBoundVars is the most bound variables one statement may use: SQLite
// builds before 3.32 cap it at 999, and a store may be opened by any of
// them, so every look-up of many ids goes in chunks of at most this many.
const maxBoundVars = 999

// inChunks calls fn for consecutive ranges [lo, hi) of n items, each at
// most maxBoundVars long.
func inChunks(n int, fn func(lo, hi int) error) error {
	for lo := 0; lo < n; lo += maxBoundVars {
		if err := fn(lo, min(lo+maxBoundVars, n)); err != nil {
			return err
		}
	}
	return nil
}

func placeholderList(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

func stringArgs(ss []string) []any {
	args := make([]any, len(ss))
	for i, s := range ss {
		args[i] = s
	}
	return args
}

// existingSessions returns which of ids are sessions in the store.
func existingSessions(ctx context.Context, q store.Querier, ids []string) (map[string]bool, error) {
	found := make(map[string]bool, len(ids))
	err := inChunks(len(ids), func(lo, hi int) error {
		rows, err := q.QueryContext(ctx, "SELECT id FROM sessions WHERE id IN ("+placeholderList(hi-lo)+")", stringArgs(ids[lo:hi])...)
		if err != nil {
			return fmt.Errorf("look up sessions: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			found[id] = true
		}
		return rows.Err()
	})
	return found, err
}

// messageCounts returns how many messages each of the sessions has; a
// session without messages is absent from the map.
func messageCounts(ctx context.Context, q store.Querier, ids []string) (map[string]int64, error) {
	counts := make(map[string]int64, len(ids))
	err := inChunks(len(ids), func(lo, hi int) error {
		rows, err := q.QueryContext(ctx, "SELECT session_id, count(*) FROM messages WHERE session_id IN ("+
			placeholderList(hi-lo)+") GROUP BY session_id", stringArgs(ids[lo:hi])...)
		if err != nil {
			return fmt.Errorf("count messages: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var n int64
			if err := rows.Scan(&id, &n); err != nil {
				return err
			}
			counts[id] = n
		}
		return rows.Err()
	})
	return counts, err
}
