package incident

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
)

// What happens before release, while the holders are still frozen
// (kindSpec.prepare):
//   - sidecar_lost: snapshot the shared main as it is now, under a read
//     transaction on the new generation so no checkpoint lands in it
//     first; the orphan WAL was built on these pages.
//   - mispaired: move the old generation's -wal/-shm out of the path
//     before a new opener recovers them into the new main.

// snapshotPath is where a sidecar_lost incident keeps its main snapshot
// until the capture adopts it; a resumed incident finds it there.
func snapshotPath(db, incident string) string { return fmt.Sprintf("%s.snapshot-%s", db, incident) }

func (e *Engine) snapshotMain(li *live) {
	if li.snapshot != "" {
		return
	}
	if dst := snapshotPath(e.st.Path, li.id); existsInStoreDir(e.st, dst) {
		li.snapshot = dst // taken by a previous agent
		return
	}
	main := li.pinOf(holders.RoleMain)
	if main == nil {
		e.log.Error("sidecar_lost without a pinned main; the capture will use the live main", "incident", li.id)
		return
	}
	dst := snapshotPath(e.st.Path, li.id)
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	e.finishBackfill(ctx, li, main)
	err := e.d.Salvage.Snapshot(ctx, e.st.Path, main.f, dst)
	for spaceShort(err) && e.pruneOneCapture(li) {
		err = e.d.Salvage.Snapshot(ctx, e.st.Path, main.f, dst)
	}
	if err != nil {
		e.emit(slog.LevelError, "main snapshot failed", EventCaptureFailed, li, "err", err)
		return
	}
	li.snapshot = dst
	e.record(li, journal.Step{Name: journal.StepSnapshotWritten, Detail: map[string]any{"path": dst}}, nil)
}

// finishBackfill completes a checkpoint a frozen orphan was stopped in
// the middle of, before the main is snapshotted: half-copied, the shared
// main is malformed for the new generation and for the capture alike.
// Pages the orphan's wal-index says were checkpointed and that the main
// does not hold are written again too (recovery.FinishInterruptedBackfill).
// When the new generation has already committed on top of it
// (recovery.ErrNewGenerationWrote), finishing the copy could overwrite
// what it wrote: the main is left as it is and the incident says so; the
// capture's WAL then fits no main and its rows are read from the WAL's
// page images.
func (e *Engine) finishBackfill(ctx context.Context, li *live, main *pin) {
	wal, shm := li.pinOf(holders.RoleWAL), li.pinOf(holders.RoleSHM)
	if wal == nil || shm == nil {
		return
	}
	rep, err := e.d.Salvage.FinishBackfill(ctx, e.st, main.f, wal.f, shm.f)
	switch {
	case err != nil:
		e.log.Warn("interrupted checkpoint not finished", "incident", li.id, "err", err)
		e.note(li, "interrupted checkpoint not finished: "+err.Error())
	case rep.Interrupted || rep.Stale > 0:
		e.log.Warn("finished the checkpoint a frozen holder was stopped in, or rewrote pages the main lacked", "incident", li.id,
			"interrupted", rep.Interrupted, "from_frame", rep.FromFrame, "to_frame", rep.ToFrame, "pages", rep.Pages, "stale_pages", rep.Stale)
		e.record(li, journal.Step{Name: journal.StepBackfillFinished, Detail: map[string]any{
			"interrupted": rep.Interrupted, "from_frame": rep.FromFrame, "to_frame": rep.ToFrame, "pages": rep.Pages,
			"stale_pages": rep.Stale, "truncated_to": rep.TruncatedTo}}, nil)
	}
}

// joinerMaxWait bounds how long a mispaired or rewritten store's frozen
// writers wait for the processes that opened the new main with the old
// generation's -wal/-shm (a backup, a status read) to close them.
const joinerMaxWait = 10 * time.Second

// quarantine moves a mispaired store's foreign sidecars into the
// incident's staging capture. While a new opener holds them (it joined
// them with the new main) they are left in place and the release waits
// for it, up to joinerMaxWait: a reader is gone in a moment, and the
// sidecars must not stay in place, where every later opener would read
// the old generation's frames over the new main (a malformed store, and
// a backup taken of it). Past the bound they are left in place and the
// incident says so. It reports false while it waits (li.wait is set).
func (e *Engine) quarantine(li *live) bool {
	if li.quarantined {
		return true
	}
	want := li.foreign
	if want == nil {
		want = map[string]fileid.ID{}
		for _, p := range li.pins {
			if p.role != holders.RoleMain {
				want[p.role.Suffix()] = p.id
			}
		}
	}
	if refs := e.adoptJoiners(li, e.joiners(li)); len(refs) > 0 {
		joined := pidsOf(refs)
		if e.d.Now().Before(li.openedAt.Add(joinerMaxWait)) {
			if li.wait.why != WaitJoiners {
				e.log.Warn("a new opener holds the old generation's sidecars; the quarantine waits for it", "incident", li.id, "pids", joined)
				for _, ref := range refs {
					e.watchExit(ref) // quarantined the moment it is gone, not at the next tick
				}
			}
			li.wait = pending{why: WaitJoiners}
			return false
		}
		li.quarantined, li.wait = true, pending{}
		msg := fmt.Sprintf("a new opener (pids %v) already joined the old generation's sidecars with the new main; files left in place, check the store by hand", joined)
		e.emit(slog.LevelError, "mispaired sidecars already in use", EventCaptureFailed, li, "pids", joined, "critical", true)
		e.note(li, msg)
		return true
	}
	li.quarantined, li.wait = true, pending{}
	staging, err := e.d.Salvage.Stage(e.captureRequest(li))
	if err != nil {
		e.emit(slog.LevelError, "stage capture failed", EventCaptureFailed, li, "err", err)
		e.note(li, err.Error())
		return true
	}
	li.staging = staging
	moved, err := e.d.Salvage.Quarantine(e.st.Path, staging, want)
	if err != nil {
		e.emit(slog.LevelError, "quarantine incomplete", EventCaptureFailed, li, "moved", moved, "err", err)
		e.note(li, err.Error())
	}
	if len(moved) > 0 {
		e.emit(slog.LevelWarn, "foreign sidecars quarantined", EventSidecarsQuarantined, li, "moved", moved)
		e.record(li, journal.Step{Name: journal.StepQuarantined, Detail: map[string]any{"moved": moved}},
			func(inc *journal.Incident) { inc.Detail.Quarantined = moved })
	}
	return true
}

// rewriteMaxWait bounds how long a rewritten main's writers stay frozen
// waiting for its rewriter to close it (an interactive `cat > state.db`
// may never): then the old sidecars are quarantined anyway.
const rewriteMaxWait = 5 * time.Minute

// rewriteQuiet is how long a rewritten main must not have changed before
// its rewrite counts as done.
const rewriteQuiet = 50 * time.Millisecond

// afterRewrite (rewritten): leave the process rewriting the main to
// finish (it is the operator's restore), then move the old generation's
// -wal/-shm out of the path before anyone opens the new content with
// them. The writers stay frozen meanwhile.
func (e *Engine) afterRewrite(li *live) bool {
	if main := li.pinOf(holders.RoleMain); !li.quarantined && main != nil && e.d.Now().Before(li.openedAt.Add(rewriteMaxWait)) {
		writing := li.rewriter != nil && e.d.Procs.Writes(*li.rewriter, main.id)
		// A rewriter that could not be named is done once the main has
		// been quiet a moment: nothing may read it half written.
		if fi, err := main.f.Stat(); err == nil && time.Since(fi.ModTime()) < rewriteQuiet { // file times are the real clock
			writing = true
			// Looked at again when the quiet is over, not at the next
			// tick: until the quarantine, any opener reads the old
			// frames over the new main.
			e.wakeIn(rewriteQuiet - time.Since(fi.ModTime()) + time.Millisecond)
		}
		if writing {
			if li.wait.why != WaitRewriter && li.rewriter != nil {
				e.watchExit(*li.rewriter)
			}
			li.wait = pending{why: WaitRewriter}
			return false
		}
	}
	li.wait = pending{}
	return e.quarantine(li)
}

// joiners lists processes outside the incident that hold the current
// -wal or -shm: they opened the new main with the old sidecars. A
// rewritten store's bystanders held them before the rewrite.
func (e *Engine) joiners(li *live) []holders.Process {
	sr, err := e.d.Scan.Targeted(e.target)
	if err != nil {
		return nil
	}
	var out []holders.Process
	for _, p := range sr.Holders {
		if li.holds(p.Ref()) || slices.Contains(li.bystanders, p.Ref()) || (li.rewriter != nil && *li.rewriter == p.Ref()) {
			continue
		}
		for _, f := range p.Files {
			if f.Role != holders.RoleMain && f.Current {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// JoinerFreezer stops a new opener the incident takes as a holder;
// Spares says which the agent must leave running (told to by its
// configuration, or the restore's own process). Procs may implement it;
// without it joiners are only waited for.
type JoinerFreezer interface {
	Spares(holders.Process) bool
	FreezeJoiner(holders.ProcRef) error
}

// adoptJoiners makes every joiner that may write the old generation a
// holder of the incident, frozen, and returns the others (readers, and
// processes it may not stop), which the quarantine waits for. A writer
// that joined the old -wal with the new main reads the old frames over
// the new content: each commit it makes lands in that -wal, and a
// checkpoint of it writes pages of the old generation into the new main.
// Waiting for it to go left the files in place and the store malformed
// (a gateway restarted between a copy made while agentd was down and the
// starting agent's quarantine). Its commits are in the old -wal, which
// the incident captures; the release applies the incident's policy.
// The holder is journaled before the stop: an agent that dies between
// them resumes an incident that releases it, never a stopped process
// nobody knows.
func (e *Engine) adoptJoiners(li *live, ps []holders.Process) []holders.ProcRef {
	f, ok := e.d.Procs.(JoinerFreezer)
	var rest []holders.ProcRef
	for _, p := range ps {
		if !ok || neverSignalled(&p) || f.Spares(p) {
			rest = append(rest, p.Ref())
			continue
		}
		h := holder{ref: p.Ref(), exe: p.Exe, files: p.Files, frozen: true}
		rec := holderRecord(&p, true)
		if !e.record(li, journal.Step{Name: journal.StepJoinerFrozen, Detail: map[string]any{"pid": p.Pid}},
			func(inc *journal.Incident) {
				inc.Detail.Holders = append(inc.Detail.Holders, rec)
				if inc.Policy == "none" { // no holder it could signal until now
					inc.Policy = string(li.policy)
				}
			}) {
			rest = append(rest, p.Ref())
			continue
		}
		e.mu.Lock()
		li.holders = append(li.holders, h) // owned before the stop: no thaw of another path's can undo it
		e.mu.Unlock()
		if err := f.FreezeJoiner(p.Ref()); err != nil {
			e.log.Warn("a new opener of the old generation's sidecars was not frozen", "incident", li.id, "pid", p.Pid, "err", err)
			e.mu.Lock()
			li.holders[len(li.holders)-1].frozen = false
			e.mu.Unlock()
			e.record(li, journal.Step{Name: journal.StepNote, Detail: map[string]any{"pid": p.Pid, "not_frozen": err.Error()}},
				func(inc *journal.Incident) { // the record said frozen: it is not
					for i := range inc.Detail.Holders {
						if hr := &inc.Detail.Holders[i]; hr.PID == p.Pid && hr.StartTicks == p.StartTicks {
							hr.Frozen = false
						}
					}
				})
			continue // a holder all the same: the release waits for it or signals it
		}
		e.emit(slog.LevelWarn, "new opener of the old generation's sidecars frozen", EventHolderFrozen, li,
			"pid", p.Pid, "exe", p.Exe, "joined", true)
	}
	return rest
}

func pidsOf(refs []holders.ProcRef) []int {
	out := make([]int, len(refs))
	for i, r := range refs {
		out[i] = r.Pid
	}
	return out
}

// captureRequest is where the incident's captures go and what they say.
func (e *Engine) captureRequest(li *live) recovery.CaptureRequest {
	pid := os.Getpid()
	if len(li.holders) > 0 {
		pid = li.holders[0].ref.Pid
	}
	return recovery.CaptureRequest{
		DBPath: e.st.Path, PID: pid, IncidentID: li.id, Kind: string(li.kind),
		MaxBytes: e.d.Config().CaptureMaxBytes, Staging: li.staging, Now: li.openedAt, Logger: e.d.Log,
	}
}
