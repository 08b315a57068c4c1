package incident

import (
	"path/filepath"
	"strings"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// Resume picks up an incident a previous agent left unfinished; the next
// Advance runs the step of the state the journal says. Its holders are
// looked up again by pid and start time: one that still lives is pinned
// again (it is still stopped if it was frozen: SIGSTOP outlives the
// agent); the orphan of one that is gone died with the previous agent's
// pins, unless the service manager kept copies of them (Keeper), a
// capture was already taken (or, for a mispaired store, its quarantined
// sidecars wait in the staging capture).
func (e *Engine) Resume(inc journal.Incident) {
	li := e.fromJournal(inc)
	if e.st.Kind == store.Hermes {
		// Lines Hermes appended while no agent ran are not told apart from
		// old ones; from here on they are followed again.
		e.markHermesDiverts(li)
	}
	e.d.Metrics.IncidentState(string(li.kind), string(li.state), 1)
	e.add(li)
	e.record(li, journal.Step{Name: journal.StepResumed, Detail: map[string]any{"state": string(inc.State)}}, nil)
	e.log.Warn("resuming incident", "incident", li.id, "kind", string(li.kind), "state", string(li.state))
	if e.phaseOf(li) == afterCapture {
		if e.d.Keeper != nil {
			e.d.Keeper.Drop(e.st.Path, li.id) // the steps after the capture need no pin
		}
		return // nor any holder
	}
	e.findHolders(li, inc.Detail.Holders)
	// The live holders' files first: pinAll takes the pin locks and holds
	// the checkpoint as at the first pin. Then the copies of the previous
	// agent's pins the service manager kept, for the files no live holder
	// has: the orphan outlived the agent even where no holder did.
	e.pinAll(li)
	e.reclaim(li)
	// A mispaired store's foreign sidecars not yet quarantined are still
	// at the path: the quarantine and its capture need no holder.
	toQuarantine := li.foreign != nil && !li.quarantined
	if len(li.holders) == 0 && li.staging == "" && len(li.pins) == 0 && !toQuarantine {
		if li.early.dir != "" {
			e.captured(li, li.early.dir) // the capture taken before release is all that is left
			return
		}
		why := "every orphan holder exited while no agent pinned the orphan; nothing left to capture"
		if len(inc.Detail.Holders) == 0 {
			// A -wal unlinked on an idle store: the agent's own fds were
			// its only holder, and they died with the agent.
			why = "the unlinked -wal was held only by the previous agent, which stopped before it could capture it; its committed rows are lost"
		}
		e.finish(li, failed, failStep(why))
		return
	}
	preRelease := e.phaseOf(li) == beforeRelease
	switch {
	case preRelease && li.policy == PolicyHold && len(li.writers()) > 0:
		li.wait = pending{why: WaitHold}
	case !preRelease:
		// Released before the restart: a terminate already sent SIGTERM;
		// give it one more grace period.
		li.wait = pending{why: WaitExit}
		if li.policy == PolicyTerminate {
			li.wait = pending{why: WaitGrace, until: e.d.Now().Add(e.policies().GraceOrDefault())}
		}
		for _, h := range li.writers() {
			e.watchExit(h.ref)
		}
	}
}

// fromJournal rebuilds the in-memory incident from its record.
func (e *Engine) fromJournal(inc journal.Incident) *live {
	li := &live{id: inc.ID, kind: inc.Kind, policy: Policy(inc.Policy), state: inc.State, prev: inc.PrevState,
		openedAt: inc.OpenedAt, replacedAt: inc.Detail.ReplacedAt, early: capture{dir: inc.Detail.CapturePath},
		capDir: inc.Detail.CapturePath, quarantined: inc.Detail.Quarantined != nil,
		needsSince: inc.Detail.NeedsActionAt, run: inc.Detail.StepRun, parked: inc.Detail.Parked}
	li.fromRecord(inc.Detail)
	if li.policy == "" || li.policy == "none" {
		li.policy = e.policies().For(inc.Kind)
	}
	if kindOf(li.kind).mainShared {
		// The main snapshot a previous agent took stays next to the store
		// until the capture adopts it: whichever step now ends the
		// incident (a capture taken before release, the final one, a
		// failure) removes it only if it is known here.
		if dst := snapshotPath(e.st.Path, li.id); existsInStoreDir(e.st, dst) {
			li.snapshot = dst
		}
	}
	li.rewriteConfirmed = inc.Detail.RewriteConfirmed
	if r := inc.Detail.Rewriter; r != nil {
		li.rewriter = &holders.ProcRef{Pid: r.PID, StartTicks: r.StartTicks}
	}
	if len(inc.Detail.Quarantined) > 0 && inc.Detail.CapturePath == "" {
		// A mispaired store's sidecars were moved into a staging capture
		// that was never finished: the capture adopts them from there.
		if d := filepath.Dir(inc.Detail.Quarantined[0]); strings.HasSuffix(d, ".partial") && existsInStoreDir(e.st, d) {
			li.staging = d
		}
	}
	return li
}

// findHolders keeps the journaled holders that still live: same pid, same
// start time, as a targeted scan sees them now. One the scan does not
// show (it failed, or a fresh agent's scan, with no history of the
// orphan's inodes, did not tie them to the store) but that still lives
// (pidfd, start time) is kept too, with its journaled files: leaving it
// out would fail the incident as "every holder exited" while the holder,
// stopped and unpinned, still keeps the orphan alive. Pin checks every
// file's identity, so a journaled fd that now names another file pins
// nothing.
func (e *Engine) findHolders(li *live, recs []journal.HolderRecord) {
	pids := make([]int, 0, len(recs))
	var files []holders.KnownFile
	for _, h := range recs {
		pids = append(pids, h.PID)
		for _, f := range h.Files {
			// Birth (when journaled) is the only proof left that an inode
			// with this number is still the orphan: the previous agent's
			// pins died with it, and the number may be an unrelated file's
			// now. Without it the cache does not look for the inode.
			files = append(files, holders.KnownFile{Store: e.st.Path, Role: holders.Role(f.Role), ID: f.ID, Birth: f.Birth})
		}
	}
	// The journaled inodes are looked for by this scan only (a fresh
	// cache knows none of an old generation renamed aside); the pins
	// taken next keep the ones still held on the cache's list.
	if e.d.Memory != nil {
		e.d.Memory.Remember(files...)
		defer e.d.Memory.ForgetFiles(files...)
	}
	var seen []holders.Process
	if sr, err := e.d.Scan.Targeted(e.target, pids...); err != nil {
		e.log.Error("targeted scan on resume failed; holders checked by pid and start time", "incident", li.id, "err", err)
	} else {
		seen = sr.Holders
	}
	var hs []holder
	for _, hr := range recs {
		ref := holders.ProcRef{Pid: hr.PID, StartTicks: hr.StartTicks}
		if p := findPid(seen, hr.PID); p != nil && p.StartTicks == hr.StartTicks {
			hs = append(hs, holder{ref: ref, exe: p.Exe, files: p.Files, frozen: hr.Frozen, readOnly: hr.ReadOnly, foreign: hr.Foreign})
			continue
		}
		if !e.d.Procs.Alive(ref) {
			continue
		}
		e.log.Warn("a journaled holder lives but the scan does not show it holding the store; its journaled files are pinned",
			"incident", li.id, "pid", hr.PID)
		hs = append(hs, holder{ref: ref, exe: hr.Exe, files: heldFiles(hr.Files), frozen: hr.Frozen, readOnly: hr.ReadOnly, foreign: hr.Foreign})
	}
	// The incident is listed already: Owns reads its holders from the
	// early freeze's goroutine (a kick), under e.mu.
	e.mu.Lock()
	li.holders = hs
	e.mu.Unlock()
}

// heldFiles turns journaled holder files back into the scan's form.
func heldFiles(fs []journal.HolderFile) []holders.Held {
	out := make([]holders.Held, 0, len(fs))
	for _, f := range fs {
		out = append(out, holders.Held{Role: holders.Role(f.Role), FD: f.FD, Mapped: f.Mmap, ID: f.ID, Birth: f.Birth})
	}
	return out
}

func findPid(ps []holders.Process, pid int) *holders.Process {
	for i := range ps {
		if ps[i].Pid == pid {
			return &ps[i]
		}
	}
	return nil
}
