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
// A transition moves forward along it and may skip states a kind or policy
// does not use (observe never freezes; a generic store is resolved after
// capture). Off the main line: failed (terminal: the agent gave up, an
// alert says why), unrecoverable (terminal: the capture cannot be used,
// what was lost and where the raw files are kept is recorded) and needs_action (an operator must act, e.g. free disk
// space; the orphan stays pinned). Any unfinished state may go to either.
// needs_action goes back onto the main line at or after the state it was
// entered from (Incident.PrevState), or to resolved/failed.
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

// blockingStates are the states in which the store's live generation is
// still being dealt with, so no replay job may write into that store:
// everything before the capture has been diverted, and needs_action.
var blockingStates = []State{StateOpen, StateFrozen, StatePinned, StateReleased, StateCaptured, StateNeedsAction}

// BlocksReplay reports whether an incident in state s holds back the
// replay jobs of its store (see Journal.ClaimNextJob).
func (s State) BlocksReplay() bool {
	for _, b := range blockingStates {
		if s == b {
			return true
		}
	}
	return false
}

// CanTransition reports whether the protocol allows from → to, without
// the needs_action rule that also depends on Incident.PrevState.
func (s State) CanTransition(to State) bool {
	if !s.Valid() || !to.Valid() || s.Terminal() || s == to {
		return false
	}
	switch {
	case to == StateFailed || to == StateNeedsAction || to == StateUnrecoverable:
		return true
	case s == StateNeedsAction:
		return to.Rank() >= 0
	default:
		return to.Rank() > s.Rank()
	}
}

// ErrInvalidTransition is returned when a transition breaks the protocol.
var ErrInvalidTransition = errors.New("invalid incident transition")

// checkTransition applies CanTransition and the needs_action rule.
func checkTransition(inc *Incident, to State) error {
	ok := inc.State.CanTransition(to)
	if ok && inc.State == StateNeedsAction && to.Rank() >= 0 &&
		inc.PrevState.Rank() >= 0 && to.Rank() < inc.PrevState.Rank() {
		ok = false
	}
	if !ok {
		return fmt.Errorf("%w: incident %s: %s → %s", ErrInvalidTransition, inc.ID, inc.State, to)
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
