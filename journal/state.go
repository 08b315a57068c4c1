package journal

import (
	"errors"
	"fmt"
	"regexp"
)

// Kind is what happened to a store's generation (docs/design.md §6, incident kinds).
type Kind string

const (
	KindReplaced    Kind = "replaced"     // main file at the path is a new inode
	KindSidecarLost Kind = "sidecar_lost" // same main, -wal/-shm unlinked or replaced
	KindMispaired   Kind = "mispaired"    // new main next to the old generation's sidecars
	KindRewritten   Kind = "rewritten"    // same main inode written by a process that is no SQLite connection of it
)

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	switch k {
	case KindReplaced, KindSidecarLost, KindMispaired, KindRewritten:
		return true
	}
	return false
}

// State is where an incident is in the protocol. The main line runs in
// this order, one state per protocol step that has completed:
//
//	open → frozen → pinned → released → captured → diverted → replaying → resolved
//
// Off the main line: failed (terminal: the agent gave up, an alert says
// why), unrecoverable (terminal: the capture cannot be used, what was lost
// and where the raw files are kept is recorded) and needs_action (an
// operator must act, e.g. free disk space; the orphan stays pinned).
//
// Which state may follow which is the incident engine's state table
// (incident/table.go), the only rule: the journal stores the state the
// engine decided. It refuses only what no engine may write: an unknown
// state, and any change of a finished incident's state.
type State string

const (
	StateOpen        State = "open"
	StateFrozen      State = "frozen"
	StatePinned      State = "pinned"
	StateReleased    State = "released"
	StateCaptured    State = "captured"
	StateDiverted    State = "diverted"
	StateReplaying   State = "replaying"
	StateResolved    State = "resolved"
	StateFailed      State = "failed"
	StateNeedsAction State = "needs_action"
	// StateUnrecoverable ends an incident whose capture cannot be used
	// (its WAL fits no main and its page images gave nothing to replay):
	// what was lost is counted, the raw files are kept, nothing retries.
	StateUnrecoverable State = "unrecoverable"
)

// mainLine orders the states for display and for Rank; it allows no move.
var mainLine = []State{
	StateOpen, StateFrozen, StatePinned, StateReleased,
	StateCaptured, StateDiverted, StateReplaying, StateResolved,
}

// States lists every state: the main line in order, then failed,
// needs_action and unrecoverable.
func States() []State {
	return append(append([]State(nil), mainLine...), StateFailed, StateNeedsAction, StateUnrecoverable)
}

// Rank is s's position on the main line, or -1 when it is off it.
func (s State) Rank() int {
	for i, m := range mainLine {
		if s == m {
			return i
		}
	}
	return -1
}

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	return s.Rank() >= 0 || s == StateFailed || s == StateNeedsAction || s == StateUnrecoverable
}

// Terminal reports whether no transition leaves s.
func (s State) Terminal() bool {
	return s == StateResolved || s == StateFailed || s == StateUnrecoverable
}

// ErrInvalidTransition is returned for a state change the journal cannot
// store: to an unknown state, out of a terminal one, or a repeat of the
// current state by another step (Transition).
var ErrInvalidTransition = errors.New("invalid incident transition")

// checkTransition refuses what no engine may write; which moves the
// protocol allows is the engine's table, not the journal's.
func checkTransition(inc *Incident, to State) error {
	switch {
	case !to.Valid():
		return fmt.Errorf("%w: incident %s: unknown state %q", ErrInvalidTransition, inc.ID, to)
	case inc.State.Terminal():
		return fmt.Errorf("%w: incident %s is %s, which is final: %s → %s", ErrInvalidTransition, inc.ID, inc.State, inc.State, to)
	}
	return nil
}

// Step names the incident protocol records. Any name matching
// [a-z0-9_]+(\.[a-z0-9_]+)* is accepted; these are the stable ones.
const (
	StepDetected         = "detected"
	StepFrozen           = "frozen"
	StepPinned           = "pinned"
	StepReleased         = "released"
	StepSnapshotWritten  = "snapshot.written"  // sidecar_lost: the shared main as at detection
	StepBackfillFinished = "backfill.finished" // sidecar_lost: a checkpoint a frozen holder was stopped in, completed
	StepWALCut           = "wal.cut"           // replaced, mispaired: the orphan WAL's position, read at its pins
	StepCaptureWritten   = "capture.written"
	StepCaptureFinal     = "capture.final" // the capture the divert reads
	StepCaptureFailed    = "capture.failed"
	StepCapturePruned    = "capture.pruned" // a resolved incident's capture removed to make room for another's
	StepQuarantined      = "sidecars.quarantined"
	StepJoinerFrozen     = "joiner.frozen" // mispaired, rewritten: a new opener of the old sidecars taken as a holder
	StepDiverted         = "diverted"
	StepReplayQueued     = "replay.queued"
	StepReplayDone       = "replay.done"
	StepReplayFailed     = "replay.failed"
	StepResumed          = "resumed" // picked up again after an agent restart
	StepNote             = "note"    // a problem that changed no state
	StepNeedsAction      = "needs_action"
	StepResolved         = "resolved"
	StepFailed           = "failed"
	StepUnrecoverable    = "unrecoverable"
	StepSalvaged         = "salvaged" // rows read from the capture's WAL page images
)

var stepNameRE = regexp.MustCompile(`^[a-z0-9_]+(\.[a-z0-9_]+)*$`)

func validStepName(name string) error {
	if len(name) > 64 || !stepNameRE.MatchString(name) {
		return fmt.Errorf("step name %q: want lower-case dotted words like %q", name, StepCaptureWritten)
	}
	return nil
}
