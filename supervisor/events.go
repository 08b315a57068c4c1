package supervisor

// Stable event names of the agent itself (the incident protocol's are in
// package incident): every log record carries one under the "event" key,
// so log-based alerting can key on them. The README lists them with their
// fields and levels; never rename one.
const (
	EventAgentStarted      = "agent.started"
	EventAgentStopping     = "agent.stopping"
	EventStoreDiscovered   = "store.discovered"
	EventStoreRemoved      = "store.removed"
	EventGenerationChanged = "generation.changed"
	EventReplayDone        = "replay.done"
	EventReplayFailed      = "replay.failed"
	// EventReplayUncheckpointed: a replay committed its rows but its
	// final checkpoint was refused, so they are only in the store's
	// -wal. Refused by another connection: the job runs again (the rows
	// are not appended twice) and checkpoints then. Held by the worker's
	// gate (the main open for writing by a process that is no
	// connection): the job is done and the idle checkpoint copies them.
	EventReplayUncheckpointed = "replay.uncheckpointed"
	EventScanUnknown          = "scan.unknown"
	EventHolderThawed         = "holder.thawed"
	EventGuardArmed           = "guard.armed"
	EventGuardReleased        = "guard.released"
	EventGuardPaused          = "guard.paused"
	EventGuardFailed          = "guard.failed"
	// EventRewriteDetected: a process that is no connection of a store
	// wrote into its live main (fanotify, root).
	EventRewriteDetected = "rewrite.detected"
	// EventDownUndecided: the look at start found a store's main changed
	// while agentd was down but could not tell whether its live WAL still
	// fits it (status shows it as a problem, with a check to run).
	EventDownUndecided = "down.undecided"
	// EventRewriteRaced: a connection's write (a checkpoint under way)
	// landed in a main while it was being rewritten in place.
	EventRewriteRaced = "rewrite.raced"
)

// QuietEvents are logged but never alerted: they fire on every writer
// start and every discovery, which is not something to page anyone about.
func QuietEvents() []string {
	return []string{EventGenerationChanged, EventStoreDiscovered, EventStoreRemoved, EventGuardCheckpointed}
}
