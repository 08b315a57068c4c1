package supervisor

// Stable event names: every log record of a protocol step carries one of
// these under the "event" key, so log-based alerting can key on them. The
// README lists them with their fields and levels; never rename one.
const (
	EventAgentStarted        = "agent.started"
	EventAgentStopping       = "agent.stopping"
	EventStoreDiscovered     = "store.discovered"
	EventStoreRemoved        = "store.removed"
	EventGenerationChanged   = "generation.changed"
	EventIncidentOpened      = "incident.opened"
	EventHolderFrozen        = "holder.frozen"
	EventHolderPinned        = "holder.pinned"
	EventHolderReleased      = "holder.released"
	EventCaptureWritten      = "capture.written"
	EventCaptureFailed       = "capture.failed"
	EventSidecarsQuarantined = "sidecars.quarantined"
	EventDiverted            = "divert.written"
	EventDivertFailed        = "divert.failed"
	EventReplayQueued        = "replay.queued"
	EventReplayDone          = "replay.done"
	EventReplayFailed        = "replay.failed"
	EventIncidentResolved    = "incident.resolved"
	EventScanUnknown         = "scan.unknown"
	EventGuardArmed          = "guard.armed"
	EventGuardReleased       = "guard.released"
	EventGuardPaused         = "guard.paused"
	EventGuardFailed         = "guard.failed"
)
