package incident

// Stable event names of the incident protocol: every log record of a step
// carries one under the "event" key, so log-based alerting can key on
// them. The README lists them with their fields and levels; never rename
// one.
const (
	EventIncidentOpened      = "incident.opened"
	EventHolderFrozen        = "holder.frozen"
	EventHolderPinned        = "holder.pinned"
	EventHolderReleased      = "holder.released"
	EventSidecarsQuarantined = "sidecars.quarantined"
	EventCaptureWritten      = "capture.written"
	EventCaptureFailed       = "capture.failed"
	EventCaptureSkipped      = "capture.skipped"
	// EventCapturePruned: a resolved incident's capture was removed
	// because a new capture did not fit (incident/capture_prune.go).
	EventCapturePruned    = "capture.pruned"
	EventDiverted         = "divert.written"
	EventDivertFailed     = "divert.failed"
	EventReplayQueued     = "replay.queued"
	EventIncidentResolved = "incident.resolved"
	// EventFrozenLimit: an incident in needs_action kept its holders
	// frozen for the frozen limit; they are resumed (error level).
	EventFrozenLimit = "incident.frozen_limit"
	// EventIncidentUnrecoverable: the capture could not be used; the
	// record names what was lost and where the raw files are kept.
	EventIncidentUnrecoverable = "incident.unrecoverable"
	// EventSalvaged: rows were read from a capture's WAL page images
	// because the WAL fits no main.
	EventSalvaged = "capture.salvaged"
)
