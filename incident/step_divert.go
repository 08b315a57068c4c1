package incident

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/walsalvage"
)

// replaceMargin moves the replaced/mispaired cut earlier than the moment
// the change was seen. A Hermes row's timestamp is taken before its commit
// starts, so a row committed into the orphan just after the restore can
// carry a timestamp from just before it; dropping it would lose a message
// its client was told was saved. The price is that rows written in the
// last moment before a restore come back: a restore rolls back hours, and
// a message acknowledged while the restore ran is one to keep.
const replaceMargin = 200 * time.Millisecond

// ReplaceMargin is replaceMargin, for the tests of other packages that
// must tell rows the restore rolled back from rows it must keep.
const ReplaceMargin = replaceMargin

// Divert retries: a divert that fails is tried again after
// divertRetryFirst, doubled each time up to divertRetry, and the
// maxDivertFails-th failure makes the incident unrecoverable with the
// capture kept, so its store's other replay jobs are no longer held back
// by it (about two minutes of tries in all, as five tries 30 s apart
// were). Most failures pass in a second or two: the divert reads the live
// store while an operator's cp or tar is still writing its main (a short
// read), or a full disk is being freed; a flat 30 s held every replay of
// a busy store back behind each of them, past a minute.
const (
	divertRetryFirst = 2 * time.Second
	divertRetry      = 30 * time.Second
	maxDivertFails   = 8
)

// divertRetryAfter is the wait after the tries-th failure (1-based).
func divertRetryAfter(tries int) time.Duration {
	d := divertRetryFirst
	for i := 1; i < tries && d < divertRetry; i++ {
		d *= 2
	}
	return min(d, divertRetry)
}

// replacedAt is when the main at path was replaced: the new main's ctime
// (rename(2) sets it), when that is earlier than the moment the agent saw
// the change — a restore done while the agent was down is seen late.
func replacedAt(s store.Store, kind journal.Kind, seen time.Time) time.Time {
	if kind == journal.KindSidecarLost || kind == journal.KindRewritten {
		return seen // the main keeps its inode: its ctime is the last write's
	}
	st, err := lstatInStoreDir(s, filepath.Base(s.Path))
	if err != nil {
		return seen
	}
	if c := time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec)); c.Before(seen) {
		return c
	}
	return seen
}

// stepDivert (captured): write the rows that exist only in the capture as
// Hermes diverted JSONL (docs/design.md §7, step 6). A generic store ends at its
// capture.
func (e *Engine) stepDivert(li *live) {
	if e.st.Kind != store.Hermes {
		e.finish(li, resolved, journal.Step{Name: journal.StepResolved, Detail: map[string]any{"note": "generic store: no row replay"}})
		return
	}
	rep, ok := e.divertNow(li)
	if !ok {
		return
	}
	e.enter(li, diverted, journal.Step{Name: journal.StepDiverted, Detail: map[string]any{
		"dir": rep.Dir, "replay_rows": rep.ReplayRows, "pre_replacement_rows": rep.PreReplacementRows, "files": len(li.replay)}},
		func(inc *journal.Incident) { inc.Detail.DivertDir = rep.Dir })
}

// divertNow runs the divert (idempotent: the same capture gives the same
// files) and keeps the files to queue. A capture whose WAL fits no main is
// read from the WAL's page images instead, at once (it will not heal); a
// salvage that cannot read it, or a divert that keeps failing, ends the
// incident unrecoverable with the raw files kept. Other failures are
// retried.
//
// The divert reads the whole capture and the live store (hundreds of
// milliseconds, seconds for a large store), so it runs on a goroutine of
// its own: the store's worker goes on checking the store, arming its
// guard and freezing the writers of its next incident meanwhile (a
// divert on the worker left a new generation unguarded for 1.4 s, and a
// last closer unlinked its WAL: issue 18's guard breaches). The first
// call starts it and reports false; the calls after Wake report false
// until it is done, then apply its outcome here, on the worker.
//
// A store's diverts run one at a time, each counting the rows the ones
// before it diverted (DivertRequest.Queued): two incidents can capture
// the same orphan rows, and two diverts reading the live store at once
// both found them missing (issue 18, seed 3's duplicate).
func (e *Engine) divertNow(li *live) (recovery.DivertReport, bool) {
	if li.diverting == nil {
		if e.divertInFlight(li) {
			li.wait = pending{why: WaitDivert, tries: li.wait.tries}
			return recovery.DivertReport{}, false
		}
		e.startDivert(li)
		return recovery.DivertReport{}, false
	}
	select {
	case <-li.diverting.done:
	default:
		return recovery.DivertReport{}, false
	}
	out := li.diverting.out
	li.diverting = nil
	e.wakeDivertWaiters(li)
	if li.wait.why == WaitDivert {
		li.wait = pending{tries: li.wait.tries}
	}
	if out.unpaired != nil {
		e.note(li, out.unpaired.Error())
	}
	if out.salvaged {
		return e.salvaged(li, out.rep, out.sr, out.err)
	}
	if out.err != nil {
		return out.rep, e.divertFailed(li, out.err)
	}
	return e.diverted(li, out.rep), true
}

// divertInFlight reports whether another incident of the store has a
// divert running or not yet applied.
func (e *Engine) divertInFlight(li *live) bool {
	for _, o := range e.all() {
		if o != li && o.diverting != nil {
			return true
		}
	}
	return false
}

// wakeDivertWaiters asks for another Advance when an incident waits for
// li's divert: it may come before li in this one and have looked already.
func (e *Engine) wakeDivertWaiters(li *live) {
	for _, o := range e.all() {
		if o != li && o.diverting == nil && o.wait.why == WaitDivert && e.d.Wake != nil {
			e.d.Wake()
			return
		}
	}
}

// queuedIncidents are the ids of the store's other unfinished incidents:
// the rows of those that have diverted are about to be replayed.
func (e *Engine) queuedIncidents(li *live) []string {
	var ids []string
	for _, o := range e.all() {
		if o != li {
			ids = append(ids, o.id)
		}
	}
	return ids
}

// divertRun is a divert in flight; out is written before done is closed.
type divertRun struct {
	done chan struct{}
	out  divertOutcome
}

type divertOutcome struct {
	rep      recovery.DivertReport
	err      error
	salvaged bool               // read from the WAL's page images
	sr       *walsalvage.Report // the salvage's, when salvaged
	unpaired error              // why the capture was salvaged instead (journaled as a note)
}

// startDivert starts li's divert. It works only on values copied here:
// the incident itself stays the worker's.
func (e *Engine) startDivert(li *live) {
	req := e.divertRequest(li)
	salvageFirst := li.kind == journal.KindRewritten && li.rewriteConfirmed
	kind, id := string(li.kind), li.id
	run := &divertRun{done: make(chan struct{})}
	li.diverting = run
	li.wait = pending{why: WaitDivert, tries: li.wait.tries}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer func() {
			close(run.done)
			if e.d.Wake != nil && e.ctx.Err() == nil {
				e.d.Wake()
			}
		}()
		if h := e.d.Hooks.InDivert; h != nil {
			h(id)
		}
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Minute)
		defer cancel()
		if salvageFirst {
			// The capture's main is the rewritten content: its WAL pairs
			// with it only by accident, and then hides what the rewrite
			// overwrote (a WAL whose frames were all checkpointed reads
			// as the new main alone). Its rows come from the WAL's page
			// images, every committed frame, checkpointed or not.
			req.Kind = kind
			run.out.salvaged = true
			run.out.rep, run.out.sr, run.out.err = e.d.Salvage.DivertWALImages(ctx, req)
			return
		}
		rep, err := e.d.Salvage.Divert(ctx, req)
		if errors.Is(err, recovery.ErrCaptureUnpaired) {
			run.out.unpaired = err
			req.Kind = kind
			run.out.salvaged = true
			run.out.rep, run.out.sr, run.out.err = e.d.Salvage.DivertWALImages(ctx, req)
			return
		}
		run.out.rep, run.out.err = rep, err
	}()
}

// divertFailed retries a failed divert after divertRetryAfter; the
// maxDivertFails-th failure ends the incident unrecoverable. It reports
// false, for divertNow's callers.
func (e *Engine) divertFailed(li *live, err error) bool {
	tries := li.wait.tries + 1
	if tries >= maxDivertFails {
		e.emit(slog.LevelError, "divert failed; giving up", EventDivertFailed, li, "capture", li.capDir, "err", err)
		e.unrecoverable(li, fmt.Sprintf("divert failed %d times: %v", tries, err), nil)
		return false
	}
	after := divertRetryAfter(tries)
	li.wait = pending{why: WaitRetry, until: e.d.Now().Add(after), tries: tries}
	e.emit(slog.LevelError, "divert failed; retried later", EventDivertFailed, li, "capture", li.capDir,
		"retry_in", after.String(), "tries", tries, "err", err)
	e.note(li, "divert: "+err.Error())
	return false
}

func (e *Engine) divertRequest(li *live) recovery.DivertRequest {
	kind := string(li.kind)
	if li.kind == journal.KindRewritten && !li.rewriteConfirmed {
		// The writer was gone before it could be looked at: it may have
		// been a connection that checkpointed and exited. A capture that
		// still reads as a whole database then keeps every row the live
		// store lacks; only page images (an unpaired WAL) take the cut.
		kind = recovery.KindSidecarLost
	}
	return recovery.DivertRequest{
		Capture: li.capDir, Store: e.st.Path, IncidentID: li.id, Kind: kind,
		ReplacedAt: li.replacedAt.Add(-replaceMargin), Cut: li.cut, ProfileHome: filepath.Dir(e.st.Path), Logger: e.d.Log,
		Queued: e.queuedIncidents(li), HermesLines: e.hermesLines(li),
	}
}

// salvaged applies a divert read from the capture's WAL page images and
// records what could not be read.
func (e *Engine) salvaged(li *live, rep recovery.DivertReport, sr *walsalvage.Report, err error) (recovery.DivertReport, bool) {
	rec := salvageRecord(sr, li.capDir)
	switch {
	case err != nil && sr == nil:
		e.unrecoverable(li, "the capture's WAL fits no main and its page images could not be read: "+err.Error(), rec)
		return rep, false
	case err != nil:
		// The rows were read; writing them out failed (the healthy store
		// busy or unreadable for now): retried like any divert.
		return rep, e.divertFailed(li, err)
	}
	e.emit(slog.LevelWarn, "rows salvaged from the WAL's page images", EventSalvaged, li, "capture", li.capDir,
		"messages", rec.Messages, "lost_messages", rec.LostMessages, "lost_pages", rec.LostPages,
		"frames", rec.FramesCommitted, "sessions_seen", len(rec.SessionsSeen))
	e.record(li, journal.Step{Name: journal.StepSalvaged, Detail: map[string]any{
		"messages": rec.Messages, "sessions": rec.Sessions, "lost_messages": rec.LostMessages,
		"lost_sessions": rec.LostSessions, "lost_pages": rec.LostPages, "frames": rec.FramesCommitted}},
		func(inc *journal.Incident) { inc.Detail.Salvage = rec })
	return e.diverted(li, rep), true
}

func (e *Engine) diverted(li *live, rep recovery.DivertReport) recovery.DivertReport {
	li.wait, li.replay = pending{}, append([]recovery.DivertFile{}, rep.ReplayFiles(false)...)
	e.emit(slog.LevelInfo, "rows only in the capture diverted", EventDiverted, li, "dir", rep.Dir,
		"sessions", rep.Sessions, "replay_rows", rep.ReplayRows, "pre_replacement_rows", rep.PreReplacementRows, "cut", rep.CutNote)
	return rep
}

// unrecoverable ends li: its capture cannot be used. The event and the
// journal name what is lost and where the raw files stay.
func (e *Engine) unrecoverable(li *live, why string, rec *journal.SalvageRecord) {
	lost := "every row only the orphaned generation held"
	if rec != nil && rec.Messages+rec.LostMessages > 0 {
		lost = fmt.Sprintf("%d message rows seen in the WAL could not be read", rec.LostMessages)
	}
	msg := fmt.Sprintf("%s; lost: %s; the raw files are kept in %s (agentctl export --capture reads them)", why, lost, li.capDir)
	e.emit(slog.LevelError, "incident unrecoverable", EventIncidentUnrecoverable, li, "reason", why, "lost", lost,
		"capture", li.capDir)
	e.finish(li, unrecoverable, journal.Step{Name: journal.StepUnrecoverable, Detail: map[string]any{"error": msg, "capture": li.capDir}},
		func(inc *journal.Incident) {
			inc.Detail.Error = msg
			if rec != nil {
				inc.Detail.Salvage = rec
			}
		})
}

// salvageRecord is the journal's form of a salvage report.
func salvageRecord(r *walsalvage.Report, capDir string) *journal.SalvageRecord {
	rec := &journal.SalvageRecord{RawFiles: capDir}
	if r == nil {
		return rec
	}
	rec.Frames, rec.FramesCommitted, rec.Pages = r.Frames, r.FramesCommitted, r.Pages
	rec.Messages, rec.Sessions = r.Rows.Messages, r.Rows.Sessions
	rec.LostMessages, rec.LostSessions = r.Unrecoverable.Messages, r.Unrecoverable.Sessions
	rec.SessionsSeen = r.SessionsSeen
	for _, l := range r.Losses {
		if l.Cell < 0 {
			rec.LostPages++
		}
	}
	return rec
}

// stepQueue (diverted): one replay job per session file (docs/design.md
// §7, step 7). The jobs run on the replay queue once no incident blocks the store.
func (e *Engine) stepQueue(li *live) {
	if li.replay == nil {
		if _, ok := e.divertNow(li); !ok { // a restart lost the file list
			return
		}
	}
	ctx, cancel := e.journalCtx()
	defer cancel()
	for _, f := range li.replay {
		job, err := e.d.Journal.EnqueueJob(ctx, journal.Job{IncidentID: li.id, Store: e.st.Path, Path: f.Path, SessionID: f.SessionID})
		if err != nil {
			// EnqueueJob merges duplicates: the next wake queues again.
			e.log.Error("queue replay failed", "incident", li.id, "path", f.Path, "err", err)
			return
		}
		e.emit(slog.LevelInfo, "replay queued", EventReplayQueued, li, "job", job.ID, "path", f.Path, "rows", f.Rows)
	}
	e.enter(li, replaying, journal.Step{Name: journal.StepReplayQueued, Detail: map[string]any{"jobs": len(li.replay)}}, nil)
}

// stepJobs (replaying): resolve once every job of the incident is done;
// fail when one has given up (docs/design.md §7, step 8).
func (e *Engine) stepJobs(li *live) {
	ctx, cancel := e.journalCtx()
	defer cancel()
	jobs, err := e.d.Journal.ListJobs(ctx, journal.JobFilter{IncidentID: li.id})
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
			e.finish(li, failed, failStep("replay job "+j.Path+" failed: "+j.LastError+" (agentctl replay "+j.Path+" --now retries it by hand)"))
			return
		default:
			li.wait = pending{why: WaitJobs}
			return
		}
	}
	e.finish(li, resolved, journal.Step{Name: journal.StepResolved, Detail: map[string]any{"replayed_rows": rows, "jobs": len(jobs)}})
}
