package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"path/filepath"
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
	var dir store.DirID
	var gate store.CheckpointGate
	ctx := a.ctx
	w := a.worker(job.Store)
	if w != nil {
		dir, gate = w.st.DirID, w
		var done func()
		ctx, done = w.startReplay(a.ctx)
		defer done()
	}
	run := func() {
		if w != nil {
			if err = w.checkFirst(); err == nil {
				err = w.replayMayStart()
			}
			if err != nil {
				err = fmt.Errorf("%w: %w", journal.ErrNotYet, err)
				return
			}
		}
		rep, err = replayJob(ctx, job, dir, gate)
		if cause := context.Cause(ctx); err != nil && errors.Is(cause, errYielded) {
			err = fmt.Errorf("%w: %w: %v", journal.ErrNotYet, cause, err)
		}
	}
	if a.restoring(job.Store) {
		// An announced restore is rewriting the store: wait for it.
		run = func() { err = fmt.Errorf("store %s is being restored; retried after the restore", job.Store) }
	}
	if w != nil {
		if derr := w.do(a.ctx, run); derr != nil {
			err = derr
		}
	} else {
		run()
	}
	a.jobEnded(job, rep, err)
}

// jobEnded journals and logs how a job's run ended, and wakes its store's
// worker: the incident may resolve now, or go on waiting.
func (a *Agent) jobEnded(job journal.Job, rep recovery.ReplayReport, err error) {
	w := a.worker(job.Store)
	log := a.log.With("job", job.ID, "store", job.Store, "path", job.Path, "incident", job.IncidentID)
	if errors.Is(err, store.ErrCheckpointHeld) && errors.Is(err, store.ErrCheckpointIncomplete) {
		// The worker's gate held the checkpoint on purpose: the main is
		// open for writing by a process that is no connection, and the
		// rows stay in the -wal the incident keeps. Running the job again
		// would meet the same gate; the worker's idle checkpoint, which
		// asks it too, copies them once the writer is gone.
		log.Warn("replay committed; its checkpoint is held while the main is open for writing by another process, and runs at the store's idle checkpoint",
			"event", EventReplayUncheckpointed, "err", err, "appended", rep.Appended)
		if w != nil {
			w.recheck.Store(true)
		}
		err = nil
	}
	if err != nil {
		j, ferr := a.journal.FailJob(context.Background(), job.ID, time.Now(), err, replayBackoff)
		if ferr != nil {
			log.Error("journal job failure", "err", ferr)
		}
		switch {
		case errors.Is(err, store.ErrCheckpointIncomplete) && j.State != journal.JobFailed:
			// Not a failed replay: its rows are committed. The job's retry
			// finds them present, appends nothing, and its close tries
			// the checkpoint again.
			log.Warn("replay committed, but its rows are only in the store's -wal (the checkpoint was refused); the job runs again to checkpoint them",
				"event", EventReplayUncheckpointed, "err", err, "appended", rep.Appended, "attempts", j.Attempts, "state", string(j.State))
		case errors.Is(err, journal.ErrNotYet):
			log.Warn("replay waits", "err", err)
		default:
			a.opts.Metrics.ReplayFailed()
			log.Error("replay failed", "event", EventReplayFailed, "err", err, "attempts", j.Attempts, "state", string(j.State))
		}
		if w != nil {
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
	if w != nil {
		w.kick(time.Now()) // the incident may resolve now
	}
}

// replayJob replays a job's file. A file stateguard diverted carries the
// capture's session row, so a session missing from the store is created
// with its real columns; any other file (Hermes' own, an operator's) is
// replayed the way `hermes sessions import` does.
//
// A job an incident queued is read and written on the profile's behalf: through
// the profile directory's handle (dir, as discovery recorded it), as its
// owner (store.AsOwner), and a file stateguard diverted only with the
// sha256 its divert.json records (recovery.ReplayInput). A job an operator
// queued (root or the agent's user, over the socket) names its file
// explicitly and is replayed as they asked.
//
// gate (the store's worker; nil: none) is asked before the replay's
// checkpoint (BeginCheckpoint).
func replayJob(ctx context.Context, job journal.Job, dir store.DirID, gate store.CheckpointGate) (recovery.ReplayReport, error) {
	opts := recovery.ReplayOptions{SessionID: job.SessionID, CheckpointGate: gate}
	if job.IncidentID == "" {
		if f, ok, err := recovery.DivertSessionFor(job.Path); err == nil && ok {
			opts = f.ReplayOptions()
		}
		opts.FromLine, opts.CheckpointGate = job.FromLine, gate
		return replayResult(recovery.ReplayFile(ctx, job.Store, job.Path, opts))
	}
	in := recovery.ReplayInput{ProfileDir: filepath.Dir(job.Store), Dir: dir}
	if f, ok, err := recovery.DivertSessionFor(job.Path); err == nil && ok {
		opts = f.ReplayOptions()
		opts.CheckpointGate = gate
		in.SHA256 = f.SHA256
	} else if recovery.IsDivertPath(filepath.Dir(job.Store), job.Path) {
		return recovery.ReplayReport{}, fmt.Errorf("%w: %w: %s is under sessions/recovered/ but no divert.json lists it; not replayed",
			journal.ErrNoRetry, recovery.ErrUntrustedInput, job.Path)
	}
	opts.FromLine = job.FromLine
	opts.Input = in
	var rep recovery.ReplayReport
	err := store.AsOwner(ownerOf(dir), ownerGroup(dir), func() (err error) {
		rep, err = recovery.ReplayFile(ctx, job.Store, job.Path, opts)
		return err
	})
	return replayResult(rep, err)
}

func replayResult(rep recovery.ReplayReport, err error) (recovery.ReplayReport, error) {
	if err != nil && (errors.Is(err, store.ErrNeedsTokenizer) || errors.Is(err, store.ErrNotWALStore) ||
		errors.Is(err, recovery.ErrUntrustedInput) || errors.Is(err, bufio.ErrTooLong)) {
		// Retrying cannot help: the store or the file needs an operator.
		return rep, fmt.Errorf("%w: %w", journal.ErrNoRetry, err)
	}
	if err != nil && errors.Is(err, store.ErrNoTable) {
		// The store lost its schema with its -wal (sidecar_lost); Hermes
		// creates it again on its next start. Wait for that, once a
		// second, without spending the job's attempts.
		return rep, fmt.Errorf("%w: waiting for Hermes to create the store's schema again: %w", journal.ErrNotYet, err)
	}
	return rep, err
}

// ownerOf is the uid to act as under dir; -1 (act as the agent) when
// discovery recorded nothing.
func ownerOf(dir store.DirID) int {
	if dir.IsZero() {
		return -1
	}
	return dir.UID
}

func ownerGroup(dir store.DirID) int {
	if dir.IsZero() {
		return -1
	}
	return dir.GID
}

func (a *Agent) quitting() bool {
	select {
	case <-a.quit:
		return true
	default:
		return false
	}
}
