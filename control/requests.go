package control

import (
	"time"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/journal"
)

// The routes, their requests and answers (supervisor serves them):
//
//	GET  /v1/status                     Status
//	GET  /v1/incidents[?all=1]          []journal.Incident (open ones unless all)
//	GET  /v1/incidents/{id}             IncidentView
//	POST /v1/incidents/{id}/release     ReleaseRequest {"how": "resume|terminate|kill"}
//	GET  /v1/jobs                       []journal.Job
//	POST /v1/jobs                       JobRequest → journal.Job (202)
//	POST /v1/guard/pause|resume         GuardRequest → GuardAnswer
//	POST /v1/restore/begin              RestoreBeginRequest → RestoreIntent
//	POST /v1/restore/end                RestoreEndRequest

// Guard states, as status reports them.
const (
	GuardArmed       = "armed"
	GuardPaused      = "paused"
	GuardOff         = "off"
	GuardUnavailable = "unavailable"
)

// Maintenance pauses: default and longest. A pause longer than a day is
// more likely forgotten than needed; pausing again extends it.
const (
	DefaultGuardPause = 15 * time.Minute
	MaxGuardPause     = 24 * time.Hour
)

// GuardRequest is the body of POST /v1/guard/pause and /v1/guard/resume.
// It names the store by path, or by profile (and home when several homes
// have that profile).
type GuardRequest struct {
	Store   string `json:"store,omitempty"`
	Profile string `json:"profile,omitempty"`
	Home    string `json:"home,omitempty"`
	// For is how long a pause lasts, as a Go duration ("15m"); default
	// DefaultGuardPause.
	For    string `json:"for,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// GuardAnswer is the answer to a guard request.
type GuardAnswer struct {
	Store   string              `json:"store"`
	Profile string              `json:"profile,omitempty"`
	Guard   *GuardStatus        `json:"guard,omitempty"`
	Pause   *journal.GuardPause `json:"pause,omitempty"`
	// Resumed is false when a resume found no pause in force.
	Resumed bool `json:"resumed,omitempty"`
}

// IncidentView is an incident with its steps.
type IncidentView struct {
	Incident journal.Incident `json:"incident"`
	Steps    []journal.Step   `json:"steps"`
}

// ReleaseRequest is the body of POST /v1/incidents/{id}/release.
type ReleaseRequest struct {
	How incident.Policy `json:"how"`
}

// JobRequest is the body of POST /v1/jobs: an operator's replay of a
// diverted JSONL (Hermes' own or ours) into a watched store.
type JobRequest struct {
	Path      string `json:"path"`                 // absolute JSONL path
	Store     string `json:"store"`                // absolute state.db path of a watched store
	SessionID string `json:"session_id,omitempty"` // "" for the file's stem
}

// Restore windows: how long one lasts unless ended, and at most.
const (
	DefaultRestoreWindow = 10 * time.Minute
	MaxRestoreWindow     = time.Hour
)

// RestoreBeginRequest is the body of POST /v1/restore/begin.
type RestoreBeginRequest struct {
	Store string `json:"store"` // the store's main file, as the daemon watches it
	PID   int    `json:"pid"`   // the restoring process
	// Window is how long the restore may take, in seconds (default 600,
	// at most 3600); the intent lapses after it even without an end.
	Window int    `json:"window_seconds,omitempty"`
	Mode   string `json:"mode,omitempty"` // online or publish, for the log
	Backup string `json:"backup,omitempty"`
}

// RestoreIntent is the daemon's answer to a begin.
type RestoreIntent struct {
	Store     string    `json:"store"`
	PID       int       `json:"pid"`
	Until     time.Time `json:"until"`
	DaemonPID int       `json:"daemon_pid"`
	Ended     bool      `json:"ended,omitempty"`
}

// RestoreEndRequest is the body of POST /v1/restore/end.
type RestoreEndRequest struct {
	Store  string `json:"store"`
	PID    int    `json:"pid"`
	Result string `json:"result"` // "done", or what failed or was refused
}
