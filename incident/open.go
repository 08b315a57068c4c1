package incident

import (
	"log/slog"
	"os"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// Opening is what detection found: an orphaned generation, who holds it,
// and what the detection already did about it.
type Opening struct {
	Kind   journal.Kind
	Policy Policy
	// Orphans hold the orphaned generation; empty when no process does
	// (a -wal deleted on an idle store, foreign sidecars next to a new
	// main).
	Orphans []holders.Process
	// Frozen are the orphans the detection stopped, by pid, and when.
	Frozen map[int]time.Time
	At     time.Time // when the change was seen
	// SeenAt, when later than At, is when the event that showed the
	// change arrived: At can be an earlier kick that was still queued
	// (kicks coalesce keeping the earliest), and the freeze latency is
	// measured from the event.
	SeenAt time.Time
	// FrozenAfter is, for orphans stopped acting on an event the agent
	// read (the fast freeze's, the gate's open, a rewrite's write), how
	// long after that event: their freeze latency, exact and never
	// negative (a check's At and SeenAt can be other events', and a
	// rewrite's At, its write, comes after the gate's stop at the open).
	FrozenAfter map[int]time.Duration
	Old, New    *journal.GenerationRecord
	// Pins are fds the agent already holds on the orphan (the guard's
	// copies, when no process holds it). The incident owns them: it
	// closes them once captured, or at once if it cannot be opened.
	Pins []Pin
	// Quarantine names, for a mispaired store nobody holds, the sidecars
	// to move out of the path, by suffix ("-wal", "-shm").
	Quarantine map[string]fileid.ID
	// Rewriter (kind rewritten) is the process writing the main in place;
	// it is never signalled, and the old generation's sidecars are
	// quarantined once it is done. Bystanders are the other connections
	// of the old generation, left running (they cannot write it): no new
	// opener that joined the old sidecars.
	Rewriter   *holders.Process
	Bystanders []holders.ProcRef
	// RewriteConfirmed: the rewriter was surely no connection of the
	// store (seen with the main open and no sidecar, or it truncated
	// the main), so its capture takes the divert cut even if its WAL
	// still fits the new content.
	RewriteConfirmed bool
	// Cut is where the orphan WAL stood when the change was seen, read
	// through the guard's fds (replaced, mispaired) or by the rewrite gate
	// at the rewriter's open (rewritten); nil when unknown.
	Cut *store.WALCut
	// FoundLate: the change happened while no agent ran and was found at
	// start (supervisor/whiledown.go). It happened after ChangedAfter,
	// the last position the journal has for the store (the Unix epoch
	// when there is none: every row the live store lacks is replayed), and
	// Cut, when set, is that position: frames up to it were committed
	// before the agent stopped. No cut is read later at the pins: frames
	// committed while no agent ran would count as rolled back.
	FoundLate    bool
	ChangedAfter time.Time
	// Evidence says what showed the change (journaled with the incident).
	Evidence string
}

// Pin is an fd the agent holds on one file of an orphaned generation.
type Pin struct {
	Role holders.Role
	ID   fileid.ID
	File *os.File
}

// frozenBefore reports whether the detection froze every orphan by the
// moment the change was seen: a rewrite's writers frozen by the gate on
// the tool's open, before it wrote a byte, so their WAL at the pins is
// their WAL at the rewrite.
func frozenBefore(o Opening) bool {
	for _, p := range o.Orphans {
		if neverSignalled(&p) {
			continue
		}
		at, ok := o.Frozen[p.Pid]
		if !ok || at.After(o.At) {
			return false
		}
	}
	return len(o.Orphans) > 0
}

// Open journals a new incident and runs its first steps at once: pin,
// prepare, capture while frozen, release (docs/design.md §7, steps 3-5). If the
// journal refuses it, holders the detection froze are thawed (none stays
// stopped without a record) and the next check tries again.
func (e *Engine) Open(o Opening) {
	li := &live{kind: o.Kind, policy: o.Policy, openedAt: e.d.Now(), replacedAt: replacedAt(e.st, o.Kind, o.At),
		foreign: o.Quarantine, bystanders: o.Bystanders, rewriteConfirmed: o.RewriteConfirmed,
		cutWanted: o.Old != nil && cutKind(o.Kind)}
	if o.Rewriter != nil {
		ref := o.Rewriter.Ref()
		li.rewriter = &ref
	}
	li.cutLate = o.Kind == journal.KindRewritten && !frozenBefore(o)
	if o.FoundLate {
		foundLate(li, o)
	}
	if o.Cut != nil && li.cutWanted {
		li.cut, li.cutSource = &recovery.FrameCut{WALCut: *o.Cut, At: li.cutTime()}, "guard"
		switch {
		case o.FoundLate:
			li.cutSource = "journal" // the position journaled before the agent stopped
		case o.Kind == journal.KindRewritten:
			li.cutSource = "gate" // read at the rewriter's open
		}
	}
	for _, p := range o.Pins {
		e.pinned(li, &pin{role: p.Role, id: p.ID, f: p.File})
	}
	ctx, cancel := e.journalCtx()
	inc, err := e.d.Journal.OpenIncident(ctx, e.incidentRecord(li, o), e.openSteps(o)...)
	cancel()
	if err != nil {
		e.log.Error("journal incident failed; releasing frozen holders", "err", err)
		for _, p := range o.Orphans {
			if _, ok := o.Frozen[p.Pid]; ok {
				_ = e.d.Procs.Thaw(p.Ref())
			}
		}
		e.unpin(li)
		return
	}
	li.id, li.state = inc.ID, inc.State
	for _, p := range li.pins {
		e.keep(li, p)
	}
	for _, p := range o.Orphans {
		_, fr := o.Frozen[p.Pid]
		li.holders = append(li.holders, holder{ref: p.Ref(), exe: p.Exe, files: p.Files, frozen: fr, readOnly: neverSignalled(&p), foreign: p.Foreign})
	}
	if e.st.Kind == store.Hermes {
		e.markHermesDiverts(li)
	}
	e.d.Metrics.IncidentOpened(string(li.kind))
	e.d.Metrics.IncidentState(string(li.kind), string(li.state), 1)
	e.add(li)
	e.emit(slog.LevelError, "orphaned generation under a live process", EventIncidentOpened, li,
		"kind", string(li.kind), "policy", string(li.policy), "holders", holderPids(li.holders),
		"read_only", readerPids(li.holders), "foreign", foreignHolders(li.holders))
	seen := o.At
	if o.SeenAt.After(seen) {
		seen = o.SeenAt
	}
	for _, h := range li.holders {
		if t, ok := o.Frozen[h.ref.Pid]; ok {
			lat, ok := o.FrozenAfter[h.ref.Pid]
			if !ok {
				// Stopped for something before the change was seen (no
				// event of its own told): the change's time is all
				// there is, and a stop before it took no time after it.
				lat = max(t.Sub(seen), 0)
			}
			e.d.Metrics.ObserveFreeze(lat)
			e.emit(slog.LevelWarn, "holder frozen", EventHolderFrozen, li, "pid", h.ref.Pid, "exe", h.exe,
				"latency_ms", float64(lat.Microseconds())/1000)
		}
	}
	for _, p := range li.pins {
		e.emit(slog.LevelInfo, "orphan inode pinned", EventHolderPinned, li, "pid", os.Getpid(),
			"role", string(p.role), "id", p.id.String(), "current", p.role == holders.RoleMain, "from", "guard")
	}
	e.run(li)
}

// incidentRecord is the journal's record of a new incident.
func (e *Engine) incidentRecord(li *live, o Opening) journal.Incident {
	policy := "none" // nobody to release: no holder, or only read-only ones
	var recs []journal.HolderRecord
	for _, p := range o.Orphans {
		if !neverSignalled(&p) {
			policy = string(o.Policy)
		}
		_, frozen := o.Frozen[p.Pid]
		recs = append(recs, holderRecord(&p, frozen))
	}
	state := open
	if len(o.Frozen) > 0 {
		state = frozen
	}
	inc := journal.Incident{
		Store: e.st.Path, Profile: e.st.Profile, Home: e.st.Home, Kind: o.Kind, State: state, Policy: policy,
		LetsReplay: e.table[state].letsReplay,
		Detail: journal.IncidentDetail{OldGeneration: o.Old, NewGeneration: o.New, Holders: recs, ReplacedAt: li.replacedAt,
			Rewriter: rewriterRecord(o.Rewriter), RewriteConfirmed: o.RewriteConfirmed, Evidence: o.Evidence},
	}
	// With the cut the divert uses, as computed here: a resumed incident
	// must divert with the same one, or the divert refuses.
	li.toRecord(&inc.Detail)
	return inc
}

// holderRecord is p as the journal keeps a holder.
func holderRecord(p *holders.Process, frozen bool) journal.HolderRecord {
	hr := journal.HolderRecord{PID: p.Pid, StartTicks: p.StartTicks, Exe: p.Exe, ReadOnly: neverSignalled(p), Foreign: p.Foreign, Frozen: frozen}
	for _, f := range p.Files {
		hr.Files = append(hr.Files, journal.HolderFile{Role: string(f.Role), FD: f.FD, Mmap: f.Mapped, ID: f.ID, Birth: f.Birth})
	}
	return hr
}

func rewriterRecord(p *holders.Process) *journal.HolderRecord {
	if p == nil {
		return nil
	}
	return &journal.HolderRecord{PID: p.Pid, StartTicks: p.StartTicks, Exe: p.Exe}
}

// openSteps are the steps an incident is opened with: its detection and,
// if the detection froze holders, that.
func (e *Engine) openSteps(o Opening) []journal.Step {
	steps := []journal.Step{{Name: journal.StepDetected, At: o.At, Detail: map[string]any{"kind": string(o.Kind)}}}
	if len(o.Frozen) > 0 {
		pids := make([]int, 0, len(o.Frozen))
		for pid := range o.Frozen {
			pids = append(pids, pid)
		}
		steps = append(steps, journal.Step{Name: journal.StepFrozen, To: frozen, Detail: map[string]any{"pids": pids}})
	}
	return steps
}
