package journal

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// JobState is where a replay job is.
type JobState string

const (
	JobQueued  JobState = "queued"  // waiting for NextAttemptAt and its store
	JobRunning JobState = "running" // claimed by a worker
	JobDone    JobState = "done"
	JobFailed  JobState = "failed" // gave up; LastError says why
)

// Job is one replay of a diverted JSONL file into a store.
type Job struct {
	ID            int64      `json:"id"`
	IncidentID    string     `json:"incident_id,omitempty"` // "" for a job an operator queued
	Store         string     `json:"store"`                 // the store key, as in Incident.Store
	Path          string     `json:"path"`                  // the JSONL file to replay
	SessionID     string     `json:"session_id,omitempty"`  // target session; "" means the file's own
	FromLine      int        `json:"from_line,omitempty"`   // replay only lines from this one (1-based); 0 = all
	State         JobState   `json:"state"`
	Attempts      int        `json:"attempts"` // how many times it was claimed
	NextAttemptAt time.Time  `json:"next_attempt_at,omitzero"`
	LastError     string     `json:"last_error,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	Result        *JobResult `json:"result,omitempty"` // set when done
}

// JobResult is what a finished replay did.
type JobResult struct {
	Appended     int   `json:"appended"`
	Skipped      int   `json:"skipped"` // already present in the store
	Invalid      int   `json:"invalid,omitempty"`
	InvalidLines []int `json:"invalid_lines,omitempty"`
}

// JobFilter filters ListJobs; zero fields match everything.
type JobFilter struct {
	IncidentID string
	Store      string
	States     []JobState
}

// Backoff is the retry schedule of FailJob: Base doubled per attempt,
// capped at Max. The zero value retries after 1s, 2s, 4s, ... up to 5m,
// forever; MaxAttempts > 0 gives up after that many attempts.
type Backoff struct {
	Base        time.Duration
	Max         time.Duration
	MaxAttempts int
}

// Delay is how long to wait after the attempt-th failed attempt (1-based).
func (b Backoff) Delay(attempt int) time.Duration {
	base, max := b.Base, b.Max
	if base <= 0 {
		base = time.Second
	}
	if max <= 0 {
		max = 5 * time.Minute
	}
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

var (
	// ErrJobNotFound is returned for an unknown job id.
	ErrJobNotFound = errors.New("no such replay job")
	// ErrJobNotRunning is returned when finishing or failing a job that
	// is not running (it was never claimed, or RequeueRunning took it back).
	ErrJobNotRunning = errors.New("replay job is not running")
	// ErrNoRetry marks a replay failure that retrying cannot fix (the file
	// is gone, the store refuses it); FailJob then fails the job for good.
	ErrNoRetry = errors.New("not retryable")
	// ErrNotYet marks a replay that waits for something outside the
	// agent (the store's schema, which Hermes creates again on its next
	// start after a lost -wal took it): FailJob queues it again after
	// Backoff.Base without counting the attempt.
	ErrNotYet = errors.New("not yet")
)

const jobCols = `id, incident_id, store, jsonl_path, session_id, state, attempts, next_attempt_at, last_error, created_at, updated_at, result, from_line`

// EnqueueJob queues a replay job and returns it as stored. A job that is
// still queued for the same incident, store, path and session is returned
// instead of a duplicate: replay is idempotent, so one pending run covers
// lines appended since it was queued. A zero NextAttemptAt means now.
func (j *Journal) EnqueueJob(ctx context.Context, job Job) (Job, error) {
	if job.Store == "" || !filepath.IsAbs(job.Path) {
		return Job{}, fmt.Errorf("enqueue replay of %q into %q: need a store and an absolute JSONL path", job.Path, job.Store)
	}
	now := j.now()
	if job.NextAttemptAt.IsZero() {
		job.NextAttemptAt = now
	}
	var out Job
	err := j.write(ctx, func(tx *sql.Tx) error {
		existing, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobCols+` FROM replay_jobs
			WHERE state = 'queued' AND coalesce(incident_id, '') = ? AND store = ? AND jsonl_path = ? AND session_id = ? AND from_line = ?
			ORDER BY id LIMIT 1`, job.IncidentID, job.Store, job.Path, job.SessionID, job.FromLine))
		if err == nil {
			out = existing
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		out, err = scanJob(tx.QueryRowContext(ctx, `INSERT INTO replay_jobs
			(incident_id, store, jsonl_path, session_id, state, attempts, next_attempt_at, last_error, created_at, updated_at, result, from_line)
			VALUES (?, ?, ?, ?, 'queued', 0, ?, '', ?, ?, NULL, ?) RETURNING `+jobCols,
			nullString(job.IncidentID), job.Store, job.Path, job.SessionID, toNanos(job.NextAttemptAt), toNanos(now), toNanos(now), job.FromLine))
		return err
	})
	if err != nil {
		return Job{}, fmt.Errorf("journal %s: enqueue replay of %s: %w", j.path, job.Path, err)
	}
	return out, nil
}

// ClaimNextJob atomically marks the next runnable job running and returns
// it; ok is false when none is runnable. Runnable means queued, due by
// now, no other job of the same store running (replays into one store run
// one at a time), and no incident of that store the engine left holding
// them back (Incident.LetsReplay false: the store's generation is still
// being dealt with).
func (j *Journal) ClaimNextJob(ctx context.Context, now time.Time) (job Job, ok bool, err error) {
	err = j.write(ctx, func(tx *sql.Tx) error {
		job, err = scanJob(tx.QueryRowContext(ctx, `UPDATE replay_jobs SET state = 'running', attempts = attempts + 1, updated_at = ?1
			WHERE id = (
				SELECT q.id FROM replay_jobs q
				WHERE q.state = 'queued' AND q.next_attempt_at <= ?1
				AND NOT EXISTS (SELECT 1 FROM replay_jobs r WHERE r.store = q.store AND r.state = 'running')
				AND NOT EXISTS (SELECT 1 FROM incidents i WHERE i.store = q.store AND i.lets_replay = 0)
				ORDER BY q.next_attempt_at, q.id LIMIT 1)
			RETURNING `+jobCols, toNanos(now)))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		ok = err == nil
		return err
	})
	if err != nil {
		return Job{}, false, fmt.Errorf("journal %s: claim replay job: %w", j.path, err)
	}
	return job, ok, nil
}

// FinishJob marks running job id done with its result.
func (j *Journal) FinishJob(ctx context.Context, id int64, result JobResult) (Job, error) {
	res, err := json.Marshal(result)
	if err != nil {
		return Job{}, fmt.Errorf("finish replay job %d: encode result: %w", id, err)
	}
	now := toNanos(j.now())
	return j.endJob(ctx, id, "finish", func(Job) (string, []any) {
		return `state = 'done', last_error = '', result = ?, updated_at = ?`, []any{string(res), now}
	})
}

// FailJob records a failed attempt of running job id: it goes back to
// queued, due after b.Delay(attempts) from now, or fails for good when
// cause wraps ErrNoRetry or b.MaxAttempts is reached. A cause wrapping
// ErrNotYet is no attempt: due again after b.Delay(1), attempts unchanged.
func (j *Journal) FailJob(ctx context.Context, id int64, now time.Time, cause error, b Backoff) (Job, error) {
	msg := "unknown error"
	if cause != nil {
		msg = cause.Error()
	}
	return j.endJob(ctx, id, "fail", func(cur Job) (string, []any) {
		if errors.Is(cause, ErrNotYet) {
			return `state = ?, next_attempt_at = ?, last_error = ?, updated_at = ?, attempts = max(attempts - 1, 0)`,
				[]any{string(JobQueued), toNanos(now.Add(b.Delay(1))), msg, toNanos(now)}
		}
		state, next := JobQueued, now.Add(b.Delay(cur.Attempts))
		if errors.Is(cause, ErrNoRetry) || (b.MaxAttempts > 0 && cur.Attempts >= b.MaxAttempts) {
			state, next = JobFailed, cur.NextAttemptAt
		}
		return `state = ?, next_attempt_at = ?, last_error = ?, updated_at = ?`, []any{string(state), toNanos(next), msg, toNanos(now)}
	})
}

// endJob updates running job id in one transaction with the SET clause
// and arguments update makes of it; a job that is not running is refused.
func (j *Journal) endJob(ctx context.Context, id int64, verb string, update func(cur Job) (set string, args []any)) (Job, error) {
	var out Job
	err := j.write(ctx, func(tx *sql.Tx) error {
		cur, err := getJob(ctx, tx, id)
		if err != nil {
			return err
		}
		if cur.State != JobRunning {
			return fmt.Errorf("%w: job %d is %s", ErrJobNotRunning, id, cur.State)
		}
		set, args := update(cur)
		out, err = scanJob(tx.QueryRowContext(ctx, `UPDATE replay_jobs SET `+set+` WHERE id = ? RETURNING `+jobCols, append(args, id)...))
		return err
	})
	if err != nil {
		return Job{}, fmt.Errorf("journal %s: %s replay job %d: %w", j.path, verb, id, err)
	}
	return out, nil
}

// RequeueRunning puts every job left running back in the queue, due now.
// Call it once on start, before any worker claims: a job still marked
// running then was interrupted by a crash or a stop. Replay commits a
// job's rows in one transaction, so rerunning it never duplicates.
func (j *Journal) RequeueRunning(ctx context.Context) (int, error) {
	var n int64
	err := j.write(ctx, func(tx *sql.Tx) error {
		now := toNanos(j.now())
		res, err := tx.ExecContext(ctx, `UPDATE replay_jobs SET state = 'queued', next_attempt_at = ?, updated_at = ?,
			last_error = 'interrupted: the agent stopped while the job ran' WHERE state = 'running'`, now, now)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("journal %s: requeue running replay jobs: %w", j.path, err)
	}
	return int(n), nil
}

// GetJob returns job id, or an error wrapping ErrJobNotFound.
func (j *Journal) GetJob(ctx context.Context, id int64) (Job, error) {
	job, err := getJob(ctx, j.db, id)
	if err != nil {
		return Job{}, fmt.Errorf("journal %s: %w", j.path, err)
	}
	return job, nil
}

func getJob(ctx context.Context, q queryer, id int64) (Job, error) {
	job, err := scanJob(q.QueryRowContext(ctx, `SELECT `+jobCols+` FROM replay_jobs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Job{}, fmt.Errorf("%w: %d", ErrJobNotFound, id)
	}
	return job, err
}

// ListJobs returns the jobs matching f in id order.
func (j *Journal) ListJobs(ctx context.Context, f JobFilter) ([]Job, error) {
	var where []string
	var args []any
	if f.IncidentID != "" {
		where = append(where, "incident_id = ?")
		args = append(args, f.IncidentID)
	}
	if f.Store != "" {
		where = append(where, "store = ?")
		args = append(args, f.Store)
	}
	if len(f.States) > 0 {
		ph := make([]string, len(f.States))
		for i, s := range f.States {
			ph[i] = "?"
			args = append(args, string(s))
		}
		where = append(where, "state IN ("+strings.Join(ph, ", ")+")")
	}
	q := `SELECT ` + jobCols + ` FROM replay_jobs`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return queryAll(ctx, j, "list replay jobs", scanJob, q+" ORDER BY id", args...)
}

func scanJob(r rowScanner) (Job, error) {
	var job Job
	var incident, result sql.NullString
	var state string
	var next, created, updated int64
	if err := r.Scan(&job.ID, &incident, &job.Store, &job.Path, &job.SessionID, &state, &job.Attempts,
		&next, &job.LastError, &created, &updated, &result, &job.FromLine); err != nil {
		return Job{}, err
	}
	job.IncidentID, job.State = incident.String, JobState(state)
	job.NextAttemptAt, job.CreatedAt, job.UpdatedAt = fromNanos(next), fromNanos(created), fromNanos(updated)
	if result.Valid {
		job.Result = new(JobResult)
		if err := json.Unmarshal([]byte(result.String), job.Result); err != nil {
			return Job{}, fmt.Errorf("replay job %d: decode result: %w", job.ID, err)
		}
	}
	return job, nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}
