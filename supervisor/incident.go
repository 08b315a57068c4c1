package supervisor

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// liveIncident is the in-memory side of an unfinished incident: what the
// journal cannot hold (open fds) and what the worker needs between steps.
type liveIncident struct {
	id       string
	kind     journal.Kind
	policy   Policy
	state    journal.State
	holders  []liveHolder
	pins     []*pin
	snapshot string    // sidecar_lost: the main as it was at detection
	staging  string    // mispaired: the capture dir the sidecars went to
	killAt   time.Time // terminate: SIGKILL after the grace period
	retryAt  time.Time // capture retry after no space
	openedAt time.Time
	// replacedAt is when the generation changed at the path: a replaced
	// incident replays only rows committed after it.
	replacedAt time.Time
	// capDir is the capture taken while every holder was still stopped,
	// before release; capStamp is the pinned main and wal as they were
	// then. If the agent dies during a terminate grace period, the orphan
	// dies with our pins, but this capture survives.
	capDir   string
	capStamp []fileStamp
	// releaseAfter is the policy to apply once the capture taken while
	// the holders are stopped succeeds ("" when not waiting for it).
	releaseAfter Policy
	// divertFails counts failed diverts; the incident gives up after a
	// few so that its store's other replays are not blocked forever.
	divertFails int
	// jsonlMarks is how far each Hermes session JSONL had been written
	// when the incident opened (see hermesdivert.go).
	jsonlMarks map[string]int64
}

type liveHolder struct {
	ref   holders.ProcRef
	exe   string
	files []holders.Held
}

// pin is one of our read-only fds on an orphaned inode. While it is open
// the inode's data outlives every other holder.
type pin struct {
	role holders.Role
	id   fileid.ID
	f    *os.File
}

// openIncident journals a new incident for orphans, then pins, prepares
// and releases per policy. frozen maps the pids already stopped to when.
// seed are pins the agent already holds on the orphan (the guard's fds
// when no process holds it); an incident without orphans has nobody to
// release and goes straight to capture.
func (w *worker) openIncident(kind journal.Kind, policy Policy, orphans []holders.Process, frozen map[int]frozenProc, at time.Time, old *journal.GenerationRecord, gen store.Generation, seed []*pin) {
	ctx := w.a.ctx
	li := &liveIncident{kind: kind, policy: policy, openedAt: time.Now(), replacedAt: replacedAt(w.st.Path, kind, at)}
	journalPolicy := string(policy)
	if len(orphans) == 0 {
		journalPolicy = "none"
	}
	var recs []journal.HolderRecord
	for _, p := range orphans {
		li.holders = append(li.holders, liveHolder{ref: p.Ref(), exe: p.Exe, files: p.Files})
		hr := journal.HolderRecord{PID: p.Pid, StartTicks: p.StartTicks, Exe: p.Exe}
		_, hr.Frozen = frozen[p.Pid]
		for _, f := range p.Files {
			hr.Files = append(hr.Files, journal.HolderFile{Role: string(f.Role), FD: f.FD, Mmap: f.Mapped, ID: f.ID})
		}
		recs = append(recs, hr)
	}
	state := journal.StateOpen
	steps := []journal.Step{{Name: journal.StepDetected, At: at, Detail: map[string]any{"kind": string(kind)}}}
	if len(frozen) > 0 {
		state = journal.StateFrozen
		pids := make([]int, 0, len(frozen))
		for pid := range frozen {
			pids = append(pids, pid)
		}
		steps = append(steps, journal.Step{Name: journal.StepFrozen, To: journal.StateFrozen, Detail: map[string]any{"pids": pids}})
	}
	inc, err := w.a.journal.OpenIncident(ctx, journal.Incident{
		Store: w.st.Path, Profile: w.st.Profile, Home: w.st.Home, Kind: kind, State: state, Policy: journalPolicy,
		Detail: journal.IncidentDetail{OldGeneration: old, NewGeneration: generationRecord(gen), Holders: recs, ReplacedAt: at},
	}, steps...)
	if err != nil {
		// Without a record the holders must not stay frozen: thaw them
		// and let the next check try again.
		w.log.Error("journal incident failed; releasing frozen holders", "err", err)
		for _, h := range li.holders {
			if _, ok := frozen[h.ref.Pid]; ok {
				_ = holders.Thaw(h.ref)
			}
		}
		for _, p := range seed {
			_ = p.f.Close()
		}
		return
	}
	li.pins = seed
	li.id, li.state = inc.ID, inc.State
	if w.st.Kind == store.Hermes {
		w.markHermesDiverts(li)
	}
	w.a.opts.Metrics.IncidentOpened(string(kind))
	w.a.opts.Metrics.IncidentState(string(kind), string(li.state), 1)
	w.mu.Lock()
	w.live[li.id] = li
	w.mu.Unlock()
	w.log.Error("orphaned generation under a live process", "event", EventIncidentOpened, "incident", li.id,
		"kind", string(kind), "policy", string(policy), "holders", holderPids(li.holders))
	for _, h := range li.holders {
		if f, ok := frozen[h.ref.Pid]; ok {
			t := f.at
			w.a.opts.Metrics.ObserveFreeze(t.Sub(at))
			w.log.Warn("holder frozen", "event", EventHolderFrozen, "incident", li.id, "pid", h.ref.Pid, "exe", h.exe,
				"latency_ms", float64(t.Sub(at).Microseconds())/1000)
		}
	}
	for _, p := range seed {
		w.log.Info("orphan inode pinned", "event", EventHolderPinned, "incident", li.id, "pid", os.Getpid(),
			"role", string(p.role), "id", p.id.String(), "current", p.role == holders.RoleMain, "from", "guard")
	}
	w.pinAll(li)
	w.prepare(li)
	if len(li.holders) == 0 {
		w.transition(li, journal.StateReleased, journal.Step{Name: journal.StepReleased, Detail: map[string]any{"how": "none", "reason": "no process held the orphan"}})
		return
	}
	if len(frozen) > 0 && policy != PolicyHold && !w.preCapture(li) {
		// No capture yet (disk full, no main snapshot): releasing now
		// would leave the orphan alive only through our pins, and an
		// agent crash would lose it. A stopped holder keeps its inodes
		// alive whatever happens to the agent, so it stays stopped until
		// a capture exists; advance retries.
		li.releaseAfter = policy
		li.retryAt = time.Now().Add(captureRetry)
		return
	}
	if policy != PolicyHold {
		w.release(li, policy)
	}
}

// captureRetry is how soon a capture that failed (disk full, over budget)
// is tried again while its holders stay frozen.
const captureRetry = 5 * time.Second

func holderPids(hs []liveHolder) []int {
	out := make([]int, 0, len(hs))
	for _, h := range hs {
		out = append(out, h.ref.Pid)
	}
	return out
}

// pinAll opens our own read-only fd on every inode of the store the
// orphan holders hold, current ones included (the sidecar_lost main is
// current and needs the lock; a mispaired store's sidecars are current
// until quarantined), and takes the guard's read locks on them so no
// orphan can become the last closer that checkpoints and unlinks.
func (w *worker) pinAll(li *liveIncident) {
	have := map[fileid.ID]bool{}
	for _, p := range li.pins {
		have[p.id] = true
	}
	var pinned []string
	for _, h := range li.holders {
		for _, f := range h.files {
			if have[f.ID] {
				continue
			}
			var fd *os.File
			var err error
			if f.FD >= 0 {
				fd, err = holders.Pin(h.ref.Pid, f.FD, f.ID)
			} else {
				fd, err = holders.PinMapped(h.ref.Pid, f.ID)
			}
			if err != nil {
				w.log.Warn("pin failed", "incident", li.id, "pid", h.ref.Pid, "role", string(f.Role), "err", err)
				continue
			}
			have[f.ID] = true
			li.pins = append(li.pins, &pin{role: f.Role, id: f.ID, f: fd})
			switch f.Role {
			case holders.RoleMain:
				err = holders.LockMainShared(fd)
			case holders.RoleSHM:
				err = holders.LockSHMRead(fd)
			}
			if err != nil {
				w.log.Warn("pin lock not taken", "incident", li.id, "role", string(f.Role), "err", err)
			}
			pinned = append(pinned, fmt.Sprintf("%s %s", f.Role, f.ID))
			w.log.Info("orphan inode pinned", "event", EventHolderPinned, "incident", li.id, "pid", h.ref.Pid,
				"role", string(f.Role), "id", f.ID.String(), "current", f.Current)
		}
	}
	if len(li.pins) > 0 && li.state.Rank() < journal.StatePinned.Rank() {
		w.transition(li, journal.StatePinned, journal.Step{Name: journal.StepPinned, Detail: map[string]any{"pins": pinned}})
	}
}

// release applies policy to the incident's frozen holders.
func (w *worker) release(li *liveIncident, policy Policy) {
	how := string(policy)
	for _, h := range li.holders {
		var err error
		switch policy {
		case PolicyTerminate:
			if err = holders.Terminate(h.ref); err == nil {
				err = holders.Thaw(h.ref)
			}
			li.killAt = time.Now().Add(w.a.policies(w.st.Path).grace())
		case PolicyKill:
			err = holders.Kill(h.ref)
		case PolicyResume:
			err = holders.Thaw(h.ref)
		case PolicyObserve, PolicyHold:
		}
		if err != nil && !errors.Is(err, holders.ErrProcessGone) {
			w.log.Error("release failed", "incident", li.id, "pid", h.ref.Pid, "how", how, "err", err)
			continue
		}
		w.log.Info("holder released", "event", EventHolderReleased, "incident", li.id, "pid", h.ref.Pid, "how", how)
		w.watchExit(h.ref)
	}
	if li.state == journal.StateReleased {
		return
	}
	if _, err := w.a.journal.UpdateIncident(w.a.ctx, li.id, journal.Step{Name: journal.StepReleased, Detail: map[string]any{"how": how}},
		func(inc *journal.Incident) error {
			inc.State, inc.Policy = journal.StateReleased, how
			for i := range inc.Detail.Holders {
				inc.Detail.Holders[i].Released = how
			}
			return nil
		}); err != nil {
		w.log.Error("journal step failed", "incident", li.id, "err", err)
	}
	w.setState(li, journal.StateReleased)
}

// watchExit kicks the worker when a holder exits, so the capture starts at
// once rather than at the next tick.
func (w *worker) watchExit(ref holders.ProcRef) {
	go func() {
		if err := holders.WaitGone(w.a.ctx, ref); err == nil || errors.Is(err, holders.ErrProcessGone) {
			w.kick(time.Now())
		}
	}()
}

// advanceAll moves every live incident on as far as it can go now.
func (w *worker) advanceAll() {
	w.mu.Lock()
	lis := make([]*liveIncident, 0, len(w.live))
	for _, li := range w.live {
		lis = append(lis, li)
	}
	w.mu.Unlock()
	for _, li := range lis {
		w.queueHermesDiverts(li)
		w.advance(li)
	}
}

func (w *worker) advance(li *liveIncident) {
	if li.releaseAfter != "" {
		if time.Now().Before(li.retryAt) {
			return
		}
		if !w.preCapture(li) {
			li.retryAt = time.Now().Add(captureRetry)
			return
		}
		p := li.releaseAfter
		li.releaseAfter, li.retryAt = "", time.Time{}
		w.release(li, p)
		return
	}
	switch li.state {
	case journal.StateReleased, journal.StatePinned, journal.StateFrozen, journal.StateOpen, journal.StateNeedsAction:
		if li.state != journal.StateReleased && li.state != journal.StateNeedsAction && li.policy != PolicyObserve && li.policy != PolicyResume {
			return // hold: waits for `agentctl release`
		}
		alive := w.aliveHolders(li)
		if len(alive) > 0 {
			if !li.killAt.IsZero() && time.Now().After(li.killAt) {
				for _, ref := range alive {
					if err := holders.Kill(ref); err == nil {
						w.log.Warn("holder did not exit within the grace period; killed", "event", EventHolderReleased,
							"incident", li.id, "pid", ref.Pid, "how", "kill-after-grace")
					}
				}
				li.killAt = time.Time{}
			}
			return
		}
		if !li.retryAt.IsZero() && time.Now().Before(li.retryAt) {
			return
		}
		w.capture(li)
	case journal.StateCaptured, journal.StateDiverted, journal.StateReplaying:
		w.afterCapture(li)
	}
}

// aliveHolders lists the holders that still exist (same pid, same start).
func (w *worker) aliveHolders(li *liveIncident) []holders.ProcRef {
	var alive []holders.ProcRef
	for _, h := range li.holders {
		st, err := holders.State(h.ref)
		if err != nil || st == 'Z' || st == 'X' {
			continue
		}
		alive = append(alive, h.ref)
	}
	return alive
}

// transition moves the incident and journals the step; a journal failure
// is logged and the in-memory state still advances, so the protocol goes
// on and the next successful write catches the journal up.
func (w *worker) transition(li *liveIncident, to journal.State, step journal.Step) {
	if li.state == to {
		return
	}
	if err := w.a.journal.Transition(w.a.ctx, li.id, to, step); err != nil {
		w.log.Error("journal transition failed", "incident", li.id, "to", string(to), "err", err)
	}
	w.setState(li, to)
}

// setState moves the in-memory state and the incidents gauge together.
func (w *worker) setState(li *liveIncident, to journal.State) {
	w.a.opts.Metrics.IncidentState(string(li.kind), string(li.state), -1)
	w.a.opts.Metrics.IncidentState(string(li.kind), string(to), 1)
	li.state = to
}

// releaseNow is `agentctl release`: an operator's decision for a held
// incident (or a change of mind for any unfinished one).
func (w *worker) releaseNow(id string, policy Policy) error {
	w.mu.Lock()
	li := w.live[id]
	w.mu.Unlock()
	if li == nil {
		return fmt.Errorf("incident %s is not waiting on its holders", id)
	}
	if li.state.Rank() >= journal.StateCaptured.Rank() {
		return fmt.Errorf("incident %s is already %s", id, li.state)
	}
	li.policy = policy
	w.release(li, policy)
	return nil
}

// closePins closes the incident's pinned fds. It runs on the worker only,
// and the agent's SQLite connections use OFD locks, so no close here can
// cancel a lock a connection of ours relies on.
func (w *worker) closePins(li *liveIncident) {
	for _, p := range li.pins {
		_ = p.f.Close()
	}
	li.pins = nil
}

func (w *worker) closeAllPins() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, li := range w.live {
		w.closePins(li)
	}
}

// finish ends an incident in a terminal state and forgets it.
func (w *worker) finish(li *liveIncident, to journal.State, step journal.Step) {
	w.transition(li, to, step)
	w.closePins(li)
	if li.snapshot != "" {
		_ = os.Remove(li.snapshot)
	}
	w.mu.Lock()
	delete(w.live, li.id)
	w.mu.Unlock()
	if to == journal.StateFailed {
		w.log.Error("incident failed", "event", EventIncidentResolved, "incident", li.id, "state", string(to), "reason", step.Detail["error"])
		return
	}
	w.log.Info("incident resolved", "event", EventIncidentResolved, "incident", li.id, "state", string(to),
		"took_ms", time.Since(li.openedAt).Milliseconds())
}
