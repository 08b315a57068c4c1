package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// replayBackoff retries a busy or failing replay: 1 s doubling to 5 min,
// giving up after 12 attempts (about half an hour).
var replayBackoff = journal.Backoff{Base: time.Second, Max: 5 * time.Minute, MaxAttempts: 12}

// replayLoop runs queued replay jobs once their store has no incident
// that blocks replay (ClaimNextJob checks). It polls the journal once a
// second: jobs are rare, and the poll resumes them after a restart for
// free.
func (a *Agent) replayLoop() {
	defer a.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-a.quit:
			return
		case <-t.C:
			a.runReplayJobs()
		}
	}
}

func (a *Agent) runReplayJobs() {
	for !a.quitting() {
		job, ok, err := a.journal.ClaimNextJob(a.ctx, time.Now())
		if err != nil || !ok {
			return
		}
		a.runJob(job)
	}
}

// runJob replays one job on its store's worker, so the writable
// connection never overlaps a close of the store's guard or pin fds.
func (a *Agent) runJob(job journal.Job) {
	var rep recovery.ReplayReport
	var err error
	run := func() { rep, err = replayJob(a.ctx, job) }
	if a.restoring(job.Store) {
		// An announced restore is rewriting the store: wait for it.
		run = func() { err = fmt.Errorf("store %s is being restored; retried after the restore", job.Store) }
	}
	if w := a.worker(job.Store); w != nil {
		if derr := w.do(a.ctx, run); derr != nil {
			err = derr
		}
	} else {
		run()
	}
	log := a.log.With("job", job.ID, "store", job.Store, "path", job.Path, "incident", job.IncidentID)
	if err != nil {
		j, ferr := a.journal.FailJob(context.Background(), job.ID, time.Now(), err, replayBackoff)
		if ferr != nil {
			log.Error("journal job failure", "err", ferr)
		}
		a.opts.Metrics.ReplayFailed()
		log.Error("replay failed", "event", EventReplayFailed, "err", err, "attempts", j.Attempts, "state", string(j.State))
		if w := a.worker(job.Store); w != nil {
			w.kick(time.Now())
		}
		return
	}
	res := journal.JobResult{Appended: rep.Appended, Skipped: rep.AlreadyPresent}
	for _, is := range rep.Issues {
		if is.Invalid {
			res.Invalid++
			res.InvalidLines = append(res.InvalidLines, is.Line)
		}
	}
	if _, err := a.journal.FinishJob(context.Background(), job.ID, res); err != nil {
		log.Error("journal job result", "err", err)
	}
	a.opts.Metrics.ReplayDone(rep.Appended)
	log.Info("replay done", "event", EventReplayDone, "appended", rep.Appended, "already_present", rep.AlreadyPresent,
		"invalid_lines", res.Invalid, "session", rep.SessionID)
	if w := a.worker(job.Store); w != nil {
		w.kick(time.Now()) // the incident may resolve now
	}
}

// replayJob replays a job's file. A file stateguard diverted carries the
// capture's session row, so a session missing from the store is created
// with its real columns; any other file (Hermes' own, an operator's) is
// replayed the way `hermes sessions import` does.
func replayJob(ctx context.Context, job journal.Job) (recovery.ReplayReport, error) {
	opts := recovery.ReplayOptions{SessionID: job.SessionID}
	if f, ok, err := recovery.DivertSessionFor(job.Path); err == nil && ok {
		opts = f.ReplayOptions()
	}
	opts.FromLine = job.FromLine
	rep, err := recovery.ReplayFile(ctx, job.Store, job.Path, opts)
	if err != nil && (errors.Is(err, store.ErrNeedsTokenizer) || errors.Is(err, store.ErrNotWALStore)) {
		// Retrying cannot help: the store needs an operator.
		return rep, fmt.Errorf("%w: %w", journal.ErrNoRetry, err)
	}
	return rep, err
}

func (a *Agent) quitting() bool {
	select {
	case <-a.quit:
		return true
	default:
		return false
	}
}
