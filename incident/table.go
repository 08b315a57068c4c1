package incident

import (
	"time"

	"github.com/stateguard/stateguard/journal"
)

// The state machine: for each state an incident can be in, the one step
// that moves it on, and every state that step may move it to. doc.go draws
// the same table; TestDiagramMatchesTable fails when they disagree, and
// enter refuses (and logs as a bug) any move the table does not list. It
// is the only rule: the journal stores the state the engine decided and
// whether it still holds back replay (letsReplay), and Resume, the retry
// and Release read how far the holders were dealt with from phase.
// TestTableIsTheOnlyRule walks every move through the engine and the
// journal.
//
// Steps are idempotent: a restarted agent runs the step of the state the
// journal says, whatever the previous agent had done of it.

// stepFunc does what its state calls for: it moves the incident on with
// enter or finish, or sets what it waits for and returns.
type stepFunc func(e *Engine, li *live)

type entry struct {
	step stepFunc
	next []journal.State
	// terminal states have no step: the incident is over.
	terminal bool
	// verify, when set, runs before the step; an error moves the incident
	// to needs_action instead. It is where a per-step identity check
	// belongs (is every pin still the inode the incident recorded, is the
	// store's directory still the one discovered), so adding one reshapes
	// nothing.
	verify func(e *Engine, li *live) error
	// phase is how far an incident in this state has dealt with its
	// holders; phaseOfPrev: the phase of the state it was entered from
	// (needs_action retries the step that failed there).
	phase       phase
	phaseOfPrev bool
	// letsReplay: the store's replay jobs may run while an incident is in
	// this state (everything the capture held has been diverted). It is
	// journaled with every step: the journal's replay gate reads it.
	letsReplay bool
}

// phase orders what an incident has done to its holders; Resume, stepRetry
// and Release decide by it, never by a state's place on the main line.
type phase int

const (
	// beforeRelease: holders as detected, the frozen ones still stopped;
	// the capture before release is still to be taken.
	beforeRelease phase = iota
	// afterRelease: holders signalled per policy; the final capture waits
	// for them to be gone.
	afterRelease
	// afterCapture: the capture is the orphan now; no pin, no holder is
	// needed any more.
	afterCapture
)

const (
	open        = journal.StateOpen
	frozen      = journal.StateFrozen
	pinned      = journal.StatePinned
	released    = journal.StateReleased
	captured    = journal.StateCaptured
	diverted    = journal.StateDiverted
	replaying   = journal.StateReplaying
	resolved    = journal.StateResolved
	failed      = journal.StateFailed
	needsAction = journal.StateNeedsAction
	// unrecoverable ends an incident whose capture cannot be used: its WAL
	// fits no main and its page images gave nothing to divert.
	unrecoverable = journal.StateUnrecoverable
)

// newTable is the state machine. A terminal state is an entry with
// terminal set, named in the next of the states that may reach it; the
// steps that decide it call finish.
func newTable() map[journal.State]entry {
	return map[journal.State]entry{
		open:          {step: (*Engine).stepPin, next: []journal.State{pinned, released, failed}},
		frozen:        {step: (*Engine).stepPin, next: []journal.State{pinned, released, needsAction, failed}},
		pinned:        {step: (*Engine).stepRelease, next: []journal.State{released, needsAction, captured, failed}},
		released:      {step: (*Engine).stepCapture, next: []journal.State{captured, needsAction, failed}, phase: afterRelease},
		needsAction:   {step: (*Engine).stepRetry, next: []journal.State{released, captured, failed}, phaseOfPrev: true},
		captured:      {step: (*Engine).stepDivert, next: []journal.State{diverted, resolved, unrecoverable}, phase: afterCapture},
		diverted:      {step: (*Engine).stepQueue, next: []journal.State{replaying, unrecoverable}, phase: afterCapture, letsReplay: true},
		replaying:     {step: (*Engine).stepJobs, next: []journal.State{resolved, failed}, phase: afterCapture, letsReplay: true},
		resolved:      {terminal: true, phase: afterCapture, letsReplay: true},
		failed:        {terminal: true, phase: afterCapture, letsReplay: true},
		unrecoverable: {terminal: true, phase: afterCapture, letsReplay: true},
	}
}

// kindSpec is what differs between incident kinds. A new kind (rewritten)
// is one more entry: what to do while its holders are still frozen, and
// how its capture treats the main file.
type kindSpec struct {
	// prepare runs before release, while the holders are stopped; it is
	// idempotent (a resumed incident runs it again). It reports false
	// when the release must wait (it set li.wait).
	prepare func(e *Engine, li *live) bool
	// mainShared: the orphan shares its main file with the new
	// generation, so the capture takes the snapshot made at detection, not
	// the live main, and the main is no sign the orphan changed.
	mainShared bool
}

func kindOf(k journal.Kind) kindSpec {
	switch k {
	case journal.KindSidecarLost:
		return kindSpec{prepare: always((*Engine).snapshotMain), mainShared: true}
	case journal.KindMispaired:
		return kindSpec{prepare: (*Engine).quarantine}
	case journal.KindRewritten:
		return kindSpec{prepare: (*Engine).afterRewrite}
	}
	return kindSpec{}
}

func always(f func(*Engine, *live)) func(*Engine, *live) bool {
	return func(e *Engine, li *live) bool { f(e, li); return true }
}

// allowed reports whether the table lets from move to to.
func (e *Engine) allowed(from, to journal.State) bool {
	for _, n := range e.table[from].next {
		if n == to {
			return true
		}
	}
	return false
}

// phaseOf is how far li has dealt with its holders. A needs_action
// entered from a state the table does not lead from is treated as after
// release, the step that then runs being the final capture.
func (e *Engine) phaseOf(li *live) phase {
	ent := e.table[li.state]
	if !ent.phaseOfPrev {
		return ent.phase
	}
	prev, ok := e.table[li.prev]
	if !ok || prev.phaseOfPrev || !e.allowed(li.prev, li.state) {
		return afterRelease
	}
	return prev.phase
}

// Advance moves every unfinished incident on as far as it can go now.
// It stops between two steps once Stop was called.
func (e *Engine) Advance() {
	for _, li := range e.all() {
		if e.stopping.Load() {
			return
		}
		e.followHermesDiverts(li)
		e.run(li)
	}
}

// run drives one incident: the step of its state, again as long as the
// step moved it and it has nothing to wait for. Once Stop was called no
// step starts.
func (e *Engine) run(li *live) {
	for {
		ent := e.table[li.state]
		if ent.terminal || ent.step == nil || !li.wait.ready(e.d.Now()) {
			return
		}
		if e.stopping.Load() || !e.beginStep(li) {
			return
		}
		if h := e.d.Hooks.BeforeStep; h != nil {
			h(li.id, li.state)
		}
		if e.stopping.Load() { // Stop came while the hook held the step
			e.endStep(li)
			return
		}
		if ent.verify != nil {
			if err := ent.verify(e, li); err != nil {
				e.needsAction(li, err.Error())
				return
			}
		}
		before, began := li.state, time.Now()
		ent.step(e, li)
		e.endStep(li)
		// How long each step held the store's worker: the figure behind
		// the freeze latency of the store's next incident.
		e.log.Debug("incident step", "incident", li.id, "state", string(before), "to", string(li.state),
			"took_ms", time.Since(began).Milliseconds())
		if li.state == before || !e.isLive(li) {
			return
		}
	}
}

func (e *Engine) isLive(li *live) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.live[li.id] == li
}
