package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// GuardPause is one maintenance pause of a store's guard (agentctl guard
// off). It ends by itself at Until, or earlier by ResumeGuard or a newer
// pause of the same store (EndedAt).
type GuardPause struct {
	ID        int64     `json:"id"`
	Store     string    `json:"store"`
	Until     time.Time `json:"until"`
	Reason    string    `json:"reason,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"` // zero unless resumed or superseded
}

// Active reports whether the pause is in force at now.
func (p GuardPause) Active(now time.Time) bool {
	return p.EndedAt.IsZero() && now.Before(p.Until)
}

const pauseCols = `id, store, until, reason, created_at, ended_at`

// PauseGuard pauses store's guard until the given time and returns the
// pause. A store has at most one pause in force: a new one supersedes it.
func (j *Journal) PauseGuard(ctx context.Context, store string, until time.Time, reason string) (GuardPause, error) {
	now := j.now()
	if store == "" {
		return GuardPause{}, errors.New("pause guard: no store")
	}
	if !until.After(now) {
		return GuardPause{}, fmt.Errorf("pause guard of %s: until %s is not in the future", store, until.Format(time.RFC3339))
	}
	var p GuardPause
	err := j.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE guard_pauses SET ended_at = min(until, ?) WHERE store = ? AND ended_at IS NULL`,
			toNanos(now), store); err != nil {
			return err
		}
		var err error
		p, err = scanPause(tx.QueryRowContext(ctx, `INSERT INTO guard_pauses (store, until, reason, created_at)
			VALUES (?, ?, ?, ?) RETURNING `+pauseCols, store, toNanos(until), reason, toNanos(now)))
		return err
	})
	if err != nil {
		return GuardPause{}, fmt.Errorf("journal %s: pause guard of %s: %w", j.path, store, err)
	}
	return p, nil
}

// ResumeGuard ends store's pause now; resumed is false when none was in
// force.
func (j *Journal) ResumeGuard(ctx context.Context, store string) (resumed bool, err error) {
	err = j.write(ctx, func(tx *sql.Tx) error {
		now := toNanos(j.now())
		res, err := tx.ExecContext(ctx, `UPDATE guard_pauses SET ended_at = ? WHERE store = ? AND ended_at IS NULL AND until > ?`,
			now, store, now)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		resumed = n > 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("journal %s: resume guard of %s: %w", j.path, store, err)
	}
	return resumed, nil
}

// ActivePauses returns the pauses in force at now, by store.
func (j *Journal) ActivePauses(ctx context.Context, now time.Time) ([]GuardPause, error) {
	return queryAll(ctx, j, "active guard pauses", scanPause, `SELECT `+pauseCols+` FROM guard_pauses
		WHERE ended_at IS NULL AND until > ? ORDER BY store, id`, toNanos(now))
}

func scanPause(r rowScanner) (GuardPause, error) {
	var p GuardPause
	var until, created int64
	var ended sql.NullInt64
	if err := r.Scan(&p.ID, &p.Store, &until, &p.Reason, &created, &ended); err != nil {
		return GuardPause{}, err
	}
	p.Until, p.CreatedAt, p.EndedAt = fromNanos(until), fromNanos(created), fromNullNanos(ended)
	return p, nil
}
