package supervisor

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// replaceMargin moves the replaced/mispaired cut earlier than the moment
// the change was seen. A Hermes row's timestamp is taken before its commit
// starts, so a row committed into the orphan just after the restore can
// carry a timestamp from just before it; dropping it would lose a message
// its client was told was saved. The price is that rows written in the
// last second before a restore come back: a restore rolls back hours, and
// a message acknowledged while the restore ran is one to keep.
const replaceMargin = 200 * time.Millisecond

// maxDivertFails bounds the retries of a divert that keeps failing (a
// malformed capture): the incident then fails with the capture kept, and
// the store's other replay jobs are no longer held back by it.
const maxDivertFails = 5

// replacedAt is when the main at path was replaced: the new main's ctime
// (rename(2) sets it), when that is earlier than the moment the agent saw
// the change — a restore done while the agent was down is seen late.
func replacedAt(path string, kind journal.Kind, seen time.Time) time.Time {
	if kind == journal.KindSidecarLost {
		return seen
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return seen
	}
	if c := time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec)); c.Before(seen) {
		return c
	}
	return seen
}

// afterCapture runs DESIGN.md steps 7-9 for a Hermes store: divert the
// rows that exist only in the capture, queue one replay job per session,
// and resolve once the jobs are done. A generic store ends at the capture.
func (w *worker) afterCapture(li *liveIncident) {
	if w.st.Kind != store.Hermes {
		w.finish(li, journal.StateResolved, journal.Step{Name: journal.StepResolved, Detail: map[string]any{"note": "generic store: no row replay"}})
		return
	}
	switch li.state {
	case journal.StateCaptured:
		w.divert(li)
	case journal.StateDiverted, journal.StateReplaying:
		w.checkJobs(li)
	}
}

func (w *worker) divert(li *liveIncident) {
	if !li.retryAt.IsZero() && time.Now().Before(li.retryAt) {
		return
	}
	ctx, cancel := context.WithTimeout(w.a.ctx, 10*time.Minute)
	defer cancel()
	rep, err := recovery.Divert(ctx, recovery.DivertRequest{
		Capture: li.capDir, Store: w.st.Path, IncidentID: li.id, Kind: string(li.kind),
		ReplacedAt: li.replacedAt.Add(-replaceMargin), ProfileHome: filepath.Dir(w.st.Path), Logger: w.a.opts.Logger,
	})
	if err != nil {
		li.divertFails++
		if li.divertFails >= maxDivertFails {
			w.log.Error("divert failed; giving up", "event", EventDivertFailed, "incident", li.id, "capture", li.capDir, "err", err)
			w.finish(li, journal.StateFailed, journal.Step{Name: journal.StepFailed, Detail: map[string]any{"error": fmt.Sprintf(
				"divert failed %d times: %v; the capture is kept at %s (agentctl export --capture, agentctl replay --capture)", li.divertFails, err, li.capDir)}})
			return
		}
		li.retryAt = time.Now().Add(30 * time.Second)
		w.log.Error("divert failed; retried in 30s", "event", EventDivertFailed, "incident", li.id, "capture", li.capDir, "err", err)
		w.note(li, "divert: "+err.Error())
		return
	}
	li.retryAt = time.Time{}
	files := rep.ReplayFiles(false)
	w.log.Info("rows only in the capture diverted", "event", EventDiverted, "incident", li.id, "dir", rep.Dir,
		"sessions", rep.Sessions, "replay_rows", rep.ReplayRows, "pre_replacement_rows", rep.PreReplacementRows)
	if _, err := w.a.journal.UpdateIncident(w.a.ctx, li.id, journal.Step{Name: journal.StepDiverted, Detail: map[string]any{
		"dir": rep.Dir, "replay_rows": rep.ReplayRows, "pre_replacement_rows": rep.PreReplacementRows, "files": len(files)}},
		func(inc *journal.Incident) error {
			inc.State, inc.Detail.DivertDir = journal.StateDiverted, rep.Dir
			return nil
		}); err != nil {
		w.log.Error("journal step failed", "incident", li.id, "err", err)
	}
	w.setState(li, journal.StateDiverted)
	for _, f := range files {
		job, err := w.a.journal.EnqueueJob(w.a.ctx, journal.Job{IncidentID: li.id, Store: w.st.Path, Path: f.Path, SessionID: f.SessionID})
		if err != nil {
			w.log.Error("queue replay failed", "incident", li.id, "path", f.Path, "err", err)
			return // the incident stays diverted; the next advance re-queues (EnqueueJob merges duplicates)
		}
		w.log.Info("replay queued", "event", EventReplayQueued, "incident", li.id, "job", job.ID, "path", f.Path, "rows", f.Rows)
	}
	w.transition(li, journal.StateReplaying, journal.Step{Name: journal.StepReplayQueued, Detail: map[string]any{"jobs": len(files)}})
	w.checkJobs(li)
}

// checkJobs resolves the incident once every one of its jobs is done, and
// fails it when one has given up.
func (w *worker) checkJobs(li *liveIncident) {
	if li.state == journal.StateDiverted {
		w.divert(li) // queueing was interrupted; Divert is idempotent
		return
	}
	jobs, err := w.a.journal.ListJobs(w.a.ctx, journal.JobFilter{IncidentID: li.id})
	if err != nil {
		return
	}
	rows := 0
	for _, j := range jobs {
		switch j.State {
		case journal.JobDone:
			if j.Result != nil {
				rows += j.Result.Appended
			}
		case journal.JobFailed:
			w.finish(li, journal.StateFailed, journal.Step{Name: journal.StepFailed, Detail: map[string]any{
				"error": "replay job " + j.Path + " failed: " + j.LastError + " (agentctl replay " + j.Path + " --now retries it by hand)"}})
			return
		default:
			return
		}
	}
	w.finish(li, journal.StateResolved, journal.Step{Name: journal.StepResolved, Detail: map[string]any{"replayed_rows": rows, "jobs": len(jobs)}})
}
