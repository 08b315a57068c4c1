package journal

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// ErrIncidentNotFound is returned for an unknown incident id.
var ErrIncidentNotFound = errors.New("no such incident")

var incidentIDRE = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z._-]{0,63}$`)

const incidentCols = `id, store, profile, home, kind, state, prev_state, policy, opened_at, updated_at, resolved_at, detail, lets_replay`

// OpenIncident records a new incident with its first steps in one
// transaction and returns it as stored. Zero fields get defaults: ID a new
// id from OpenedAt, OpenedAt now, State open. The protocol may record an
// incident after freezing and pinning (docs/design.md §7, step 2), so inc.State may
// be any unfinished state, and steps may carry what already happened; with
// no steps a single "detected" step at OpenedAt is recorded. The last step
// is marked as the transition into inc.State.
func (j *Journal) OpenIncident(ctx context.Context, inc Incident, steps ...Step) (Incident, error) {
	if inc.Store == "" {
		return Incident{}, errors.New("open incident: no store")
	}
	if !inc.Kind.Valid() {
		return Incident{}, fmt.Errorf("open incident for %s: unknown kind %q", inc.Store, inc.Kind)
	}
	if inc.State == "" {
		inc.State = StateOpen
	}
	if !inc.State.Valid() || inc.State.Terminal() {
		return Incident{}, fmt.Errorf("open incident for %s: cannot start in state %q", inc.Store, inc.State)
	}
	now := j.now()
	if inc.OpenedAt.IsZero() {
		inc.OpenedAt = now
	}
	inc.UpdatedAt = now
	inc.PrevState, inc.ResolvedAt = "", time.Time{}
	givenID := inc.ID != ""
	if givenID && !incidentIDRE.MatchString(inc.ID) {
		return Incident{}, fmt.Errorf("open incident for %s: id %q: want letters, digits, '.', '_', '-'", inc.Store, inc.ID)
	}
	if len(steps) == 0 {
		steps = []Step{{Name: StepDetected, At: inc.OpenedAt}}
	}
	steps = append([]Step(nil), steps...)
	for i := range steps {
		if err := validStepName(steps[i].Name); err != nil {
			return Incident{}, fmt.Errorf("open incident for %s: %w", inc.Store, err)
		}
		if steps[i].At.IsZero() {
			steps[i].At = now
		}
		steps[i].From, steps[i].To = "", ""
	}
	steps[len(steps)-1].To = inc.State
	detail, err := json.Marshal(inc.Detail)
	if err != nil {
		return Incident{}, fmt.Errorf("open incident for %s: encode detail: %w", inc.Store, err)
	}
	err = j.write(ctx, func(tx *sql.Tx) error {
		for attempt := 0; ; attempt++ {
			if !givenID {
				inc.ID = newIncidentID(inc.OpenedAt)
			}
			var n int
			if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM incidents WHERE id = ?", inc.ID).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				break
			}
			if givenID || attempt >= 8 {
				return fmt.Errorf("incident id %s already exists", inc.ID)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO incidents (`+incidentCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?)`,
			inc.ID, inc.Store, inc.Profile, inc.Home, string(inc.Kind), string(inc.State), "", inc.Policy,
			toNanos(inc.OpenedAt), toNanos(inc.UpdatedAt), string(detail), inc.LetsReplay); err != nil {
			return err
		}
		for i := range steps {
			if err := insertStep(ctx, tx, inc.ID, &steps[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Incident{}, fmt.Errorf("journal %s: open incident for %s: %w", j.path, inc.Store, err)
	}
	return inc, nil
}

// newIncidentID is the opening time in UTC to the second plus 24 random
// bits: sortable, readable in a path, unique in practice (and checked).
func newIncidentID(t time.Time) string {
	var b [3]byte
	rand.Read(b[:])
	return t.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// errNoChange rolls back a write that turned out to have nothing to do.
var errNoChange = errors.New("no change")

// Transition moves incident id to state to and appends step in the same
// transaction, leaving LetsReplay as it was. It refuses what no engine may
// write (checkTransition) with ErrInvalidTransition. Repeating a transition that already happened (the
// incident is in to, entered by a step of the same name) is a no-op, so a
// resumed worker can redo its last step safely.
func (j *Journal) Transition(ctx context.Context, id string, to State, step Step) error {
	_, err := j.update(ctx, id, step, func(tx *sql.Tx, inc *Incident) error {
		if inc.State == to {
			var last string
			err := tx.QueryRowContext(ctx, `SELECT name FROM incident_steps WHERE incident_id = ? AND to_state = ? ORDER BY seq DESC LIMIT 1`,
				id, string(to)).Scan(&last)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if last == step.Name {
				return errNoChange
			}
			return fmt.Errorf("%w: incident %s is already %s (entered by step %q, not %q)", ErrInvalidTransition, id, to, last, step.Name)
		}
		inc.State = to
		return nil
	})
	return err
}

// UpdateIncident applies fn to incident id and appends step, in one
// transaction: the way to record what a step learned (capture path,
// holders released) together with the step and, if fn changes State, the
// transition, validated as in Transition. fn may change State, LetsReplay,
// Policy, Profile, Home and Detail; changes to other fields are ignored. fn runs
// inside the journal's write lock: it must not do I/O or call the journal.
func (j *Journal) UpdateIncident(ctx context.Context, id string, step Step, fn func(*Incident) error) (Incident, error) {
	return j.update(ctx, id, step, func(_ *sql.Tx, inc *Incident) error { return fn(inc) })
}

func (j *Journal) update(ctx context.Context, id string, step Step, fn func(*sql.Tx, *Incident) error) (Incident, error) {
	if err := validStepName(step.Name); err != nil {
		return Incident{}, fmt.Errorf("incident %s: %w", id, err)
	}
	var out Incident
	err := j.write(ctx, func(tx *sql.Tx) error {
		before, err := getIncident(ctx, tx, id)
		if err != nil {
			return err
		}
		inc := before
		inc.Detail = cloneDetail(before.Detail)
		if err := fn(tx, &inc); err != nil {
			return err
		}
		inc.ID, inc.Store, inc.Kind, inc.OpenedAt = before.ID, before.Store, before.Kind, before.OpenedAt
		inc.PrevState, inc.ResolvedAt = before.PrevState, before.ResolvedAt
		now := j.now()
		if step.At.IsZero() {
			step.At = now
		}
		step.From, step.To = "", ""
		if inc.State != before.State {
			if err := checkTransition(&before, inc.State); err != nil {
				return err
			}
			step.From, step.To = before.State, inc.State
			inc.PrevState = before.State
			if inc.State.Terminal() {
				inc.ResolvedAt = step.At
			}
		}
		inc.UpdatedAt = now
		detail, err := json.Marshal(inc.Detail)
		if err != nil {
			return fmt.Errorf("encode detail: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE incidents SET profile = ?, home = ?, state = ?, prev_state = ?, policy = ?,
			updated_at = ?, resolved_at = ?, detail = ?, lets_replay = ? WHERE id = ?`,
			inc.Profile, inc.Home, string(inc.State), string(inc.PrevState), inc.Policy,
			toNanos(inc.UpdatedAt), nullNanos(inc.ResolvedAt), string(detail), inc.LetsReplay, id); err != nil {
			return err
		}
		if err := insertStep(ctx, tx, id, &step); err != nil {
			return err
		}
		out = inc
		return nil
	})
	if errors.Is(err, errNoChange) {
		return j.GetIncident(ctx, id)
	}
	if err != nil {
		return Incident{}, fmt.Errorf("journal %s: incident %s: step %s: %w", j.path, id, step.Name, err)
	}
	return out, nil
}

// cloneDetail copies d's slices and map so fn cannot alias the original.
func cloneDetail(d IncidentDetail) IncidentDetail {
	b, err := json.Marshal(d)
	if err != nil {
		return d
	}
	var c IncidentDetail
	if err := json.Unmarshal(b, &c); err != nil {
		return d
	}
	return c
}

// AddStep appends a step that does not change the incident's state (a
// retry, a holder that exited, a note) and returns it with Seq and At set.
func (j *Journal) AddStep(ctx context.Context, id string, step Step) (Step, error) {
	if err := validStepName(step.Name); err != nil {
		return Step{}, fmt.Errorf("incident %s: %w", id, err)
	}
	now := j.now()
	if step.At.IsZero() {
		step.At = now
	}
	step.From, step.To = "", ""
	err := j.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "UPDATE incidents SET updated_at = ? WHERE id = ?", toNanos(now), id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: %s", ErrIncidentNotFound, id)
		}
		return insertStep(ctx, tx, id, &step)
	})
	if err != nil {
		return Step{}, fmt.Errorf("journal %s: incident %s: step %s: %w", j.path, id, step.Name, err)
	}
	return step, nil
}

func insertStep(ctx context.Context, tx *sql.Tx, id string, s *Step) error {
	detail := []byte("{}")
	if len(s.Detail) > 0 {
		var err error
		if detail, err = json.Marshal(s.Detail); err != nil {
			return fmt.Errorf("encode step %s detail: %w", s.Name, err)
		}
	}
	err := tx.QueryRowContext(ctx, `INSERT INTO incident_steps (incident_id, seq, name, at, from_state, to_state, detail)
		VALUES (?, (SELECT coalesce(max(seq), 0) + 1 FROM incident_steps WHERE incident_id = ?), ?, ?, ?, ?, ?)
		RETURNING seq`,
		id, id, s.Name, toNanos(s.At), string(s.From), string(s.To), string(detail)).Scan(&s.Seq)
	return err
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func getIncident(ctx context.Context, q queryer, id string) (Incident, error) {
	inc, err := scanIncident(q.QueryRowContext(ctx, `SELECT `+incidentCols+` FROM incidents WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Incident{}, fmt.Errorf("%w: %s", ErrIncidentNotFound, id)
	}
	return inc, err
}

// GetIncident returns incident id, or an error wrapping ErrIncidentNotFound.
func (j *Journal) GetIncident(ctx context.Context, id string) (Incident, error) {
	inc, err := getIncident(ctx, j.db, id)
	if err != nil {
		return Incident{}, fmt.Errorf("journal %s: %w", j.path, err)
	}
	return inc, nil
}

// ListIncidents returns incidents oldest first.
func (j *Journal) ListIncidents(ctx context.Context, opt ListOptions) ([]Incident, error) {
	var where []string
	var args []any
	if opt.OpenOnly {
		// The first term is the partial index's own condition, so the
		// index stays usable; unrecoverable came later.
		where = append(where, "state NOT IN ('resolved', 'failed') AND state <> 'unrecoverable'")
	}
	if opt.State != "" {
		where = append(where, "state = ?")
		args = append(args, string(opt.State))
	}
	if opt.Store != "" {
		where = append(where, "store = ?")
		args = append(args, opt.Store)
	}
	q := `SELECT ` + incidentCols + ` FROM incidents`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return queryAll(ctx, j, "list incidents", scanIncident, q+" ORDER BY opened_at, id", args...)
}

// Unfinished returns every incident not yet in a terminal state, oldest
// first: what the agent resumes on start.
func (j *Journal) Unfinished(ctx context.Context) ([]Incident, error) {
	return j.ListIncidents(ctx, ListOptions{OpenOnly: true})
}

// Steps returns incident id's steps in order.
func (j *Journal) Steps(ctx context.Context, id string) ([]Step, error) {
	if _, err := j.GetIncident(ctx, id); err != nil {
		return nil, err
	}
	rows, err := j.db.QueryContext(ctx, `SELECT seq, name, at, from_state, to_state, detail FROM incident_steps
		WHERE incident_id = ? ORDER BY seq`, id)
	if err != nil {
		return nil, fmt.Errorf("journal %s: steps of %s: %w", j.path, id, err)
	}
	defer rows.Close()
	var out []Step
	for rows.Next() {
		var s Step
		var at int64
		var from, to, detail string
		if err := rows.Scan(&s.Seq, &s.Name, &at, &from, &to, &detail); err != nil {
			return nil, fmt.Errorf("journal %s: steps of %s: %w", j.path, id, err)
		}
		s.At, s.From, s.To = fromNanos(at), State(from), State(to)
		if detail != "{}" {
			dec := json.NewDecoder(bytes.NewReader([]byte(detail)))
			dec.UseNumber()
			if err := dec.Decode(&s.Detail); err != nil {
				return nil, fmt.Errorf("journal %s: step %d of %s: decode detail: %w", j.path, s.Seq, id, err)
			}
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("journal %s: steps of %s: %w", j.path, id, err)
	}
	return out, nil
}

type rowScanner interface{ Scan(dest ...any) error }

func scanIncident(r rowScanner) (Incident, error) {
	var inc Incident
	var kind, state, prev, detail string
	var opened, updated int64
	var resolved sql.NullInt64
	if err := r.Scan(&inc.ID, &inc.Store, &inc.Profile, &inc.Home, &kind, &state, &prev, &inc.Policy,
		&opened, &updated, &resolved, &detail, &inc.LetsReplay); err != nil {
		return Incident{}, err
	}
	inc.Kind, inc.State, inc.PrevState = Kind(kind), State(state), State(prev)
	inc.OpenedAt, inc.UpdatedAt, inc.ResolvedAt = fromNanos(opened), fromNanos(updated), fromNullNanos(resolved)
	if err := json.Unmarshal([]byte(detail), &inc.Detail); err != nil {
		return Incident{}, fmt.Errorf("incident %s: decode detail: %w", inc.ID, err)
	}
	return inc, nil
}
