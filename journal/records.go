package journal

import (
	"time"

	"github.com/stateguard/stateguard/fileid"
)

// Incident is the journal's record of one orphaned generation.
type Incident struct {
	ID        string    `json:"id"`    // e.g. 20261129T231500Z-3fa9c1; sorts by opening time
	Store     string    `json:"store"` // the store key: the main file's path
	Profile   string    `json:"profile"`
	Home      string    `json:"home"`
	Kind      Kind      `json:"kind"`
	State     State     `json:"state"`
	PrevState State     `json:"prev_state,omitempty"` // the state before the last transition ("" at first)
	Policy    string    `json:"policy"`               // the release policy applied (terminate, kill, ...)
	OpenedAt  time.Time `json:"opened_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// ResolvedAt is when the incident reached resolved or failed; zero
	// while it is unfinished.
	ResolvedAt time.Time      `json:"resolved_at,omitzero"`
	Detail     IncidentDetail `json:"detail"`
	// LetsReplay is the engine's decision, journaled with each step, that
	// the incident no longer holds back its store's replay jobs (its
	// table's letsReplay for State). False, the zero value, holds them
	// back: a job run too early writes into a generation still being dealt
	// with, one run late only waits.
	LetsReplay bool `json:"lets_replay"`
}

// IncidentDetail is what the protocol learned about an incident, kept as
// JSON in the incident row and rewritten with each UpdateIncident.
type IncidentDetail struct {
	OldGeneration *GenerationRecord `json:"old_generation,omitempty"`
	NewGeneration *GenerationRecord `json:"new_generation,omitempty"`
	Holders       []HolderRecord    `json:"holders,omitempty"`
	// ReplacedAt is when the generation changed at the path; divert keeps
	// only rows committed after it for replaced incidents.
	ReplacedAt time.Time `json:"replaced_at,omitzero"`
	// WALCut is where the orphan's WAL stood when the agent saw the main
	// replaced (replaced, mispaired): the divert replays what the orphan
	// committed after it. Journaled so a resumed incident uses the same.
	WALCut       *WALCutRecord `json:"wal_cut,omitempty"`
	CapturePath  string        `json:"capture_path,omitempty"`
	CaptureBytes int64         `json:"capture_bytes,omitempty"`
	Quarantined  []string      `json:"quarantined,omitempty"` // mispaired sidecars moved aside
	DivertDir    string        `json:"divert_dir,omitempty"`
	Error        string        `json:"error,omitempty"` // last error, for needs_action, failed and unrecoverable
	// NeedsActionAt is when the incident last entered needs_action: what
	// the frozen limit counts from, across restarts.
	NeedsActionAt time.Time `json:"needs_action_at,omitzero"`
	// StepRun is the step under way, when an agent started one and did
	// not come back from it (SetStepRun).
	StepRun *StepRun `json:"step_run,omitempty"`
	// Parked says why the incident's step is not run again (two agents
	// died in it); an operator's release clears it.
	Parked string `json:"parked,omitempty"`
	// Rewriter is the process that rewrote the main in place (kind
	// rewritten): never signalled, waited for.
	Rewriter         *HolderRecord `json:"rewriter,omitempty"`
	RewriteConfirmed bool          `json:"rewrite_confirmed,omitempty"`
	// Salvage is what was read from the capture's WAL page images when its
	// WAL fit no main, and what could not be.
	Salvage *SalvageRecord `json:"salvage,omitempty"`
	// Evidence is what showed an incident found at start (a change made
	// while no agent ran): the check that failed, or the holders found.
	Evidence string         `json:"evidence,omitempty"`
	Extra    map[string]any `json:"extra,omitempty"`

	// What the engine holds of an incident between two steps and a
	// resumed incident needs again; the engine writes all of it with
	// every step (incident/record.go).
	//
	// Bystanders (rewritten) are the old generation's other connections,
	// left running: no new opener the quarantine must wait for.
	Bystanders []HolderRecord `json:"bystanders,omitempty"`
	// Quarantine (mispaired, nobody holding it) names the sidecars to
	// move out of the path, by suffix ("-wal", "-shm").
	Quarantine map[string]fileid.ID `json:"quarantine,omitempty"`
	// CutWanted: the agent saw the change happen, so a frame cut the
	// detection could not read is read at the pins. CutLate: that cut
	// comes after the change (a rewrite's writers frozen after its first
	// write) and keeps the timestamp margin.
	CutWanted bool `json:"cut_wanted,omitempty"`
	CutLate   bool `json:"cut_late,omitempty"`
	// Tries counts the consecutive failures of the step being retried
	// (a divert gives up after a bound), across restarts.
	Tries int `json:"tries,omitempty"`
}

// SalvageRecord counts what a salvage from a WAL's page images read,
// recovered and lost.
type SalvageRecord struct {
	Frames          int      `json:"frames"`
	FramesCommitted int      `json:"frames_committed"`
	Pages           int      `json:"pages"`
	Messages        int      `json:"messages"`      // rows recovered
	Sessions        int      `json:"sessions"`      // session rows recovered
	LostMessages    int      `json:"lost_messages"` // message cells seen that could not be read
	LostSessions    int      `json:"lost_sessions"` // session cells seen that could not be read
	LostPages       int      `json:"lost_pages"`    // pages that could not be read at all
	SessionsSeen    []string `json:"sessions_seen,omitempty"`
	RawFiles        string   `json:"raw_files,omitempty"` // the capture that keeps the WAL
}

// WALCutRecord is a frame cut as journaled: frames up to Frame of the WAL
// with these salts were committed at At.
type WALCutRecord struct {
	Frame  uint32    `json:"frame"`
	Salt1  uint32    `json:"salt1"`
	Salt2  uint32    `json:"salt2"`
	At     time.Time `json:"at"`
	Source string    `json:"source,omitempty"` // guard (at detection), gate (at a rewriter's open) or pin
}

// GenerationRecord is a generation's identity as journaled.
type GenerationRecord struct {
	Main  FileRecord `json:"main"`
	WAL   FileRecord `json:"wal,omitzero"`
	SHM   FileRecord `json:"shm,omitzero"`
	Salt1 uint32     `json:"salt1,omitempty"`
	Salt2 uint32     `json:"salt2,omitempty"`
}

// FileRecord is one file's identity (dev, ino) and size.
type FileRecord struct {
	fileid.ID
	Size int64 `json:"size,omitempty"`
}

// HolderRecord is one orphan holder as journaled. StartTicks is the
// process start time the scan saw; the holder is never signalled again
// unless it still matches, so a reused pid is safe after a restart.
type HolderRecord struct {
	PID        int          `json:"pid"`
	StartTicks uint64       `json:"start_ticks"`
	Exe        string       `json:"exe,omitempty"`
	Files      []HolderFile `json:"files,omitempty"`
	Frozen     bool         `json:"frozen,omitempty"`
	// ReadOnly: every fd and mapping it had on the orphan was read-only,
	// so it cannot write the orphaned generation, or it is Foreign; it is
	// pinned and reported, never signalled.
	ReadOnly bool `json:"read_only,omitempty"`
	// Foreign says why it is another user's process the agent may not
	// signal (holders.Process.Foreign); "" for the store owner's.
	Foreign  string `json:"foreign,omitempty"`
	Released string `json:"released,omitempty"` // how: terminate, kill, resume, exited
}

// HolderFile is one orphan inode a holder has open or mapped.
type HolderFile struct {
	Role string `json:"role"` // main, wal or shm
	FD   int    `json:"fd"`   // -1 when only mapped
	Mmap bool   `json:"mmap,omitempty"`
	fileid.ID
	// Birth is the inode's birth time (statx btime, ns) when the scan
	// knew it: after a restart, the only proof that a file with this
	// number is still the orphan and not a file that reused it.
	Birth int64 `json:"birth,omitempty"`
}

// Step is one journaled event of an incident. From and To are set when the
// step changed the incident's state. Detail is free-form; numbers read
// back from the journal are json.Number.
type Step struct {
	Seq    int64          `json:"seq"` // 1, 2, ... per incident; assigned by the journal
	Name   string         `json:"name"`
	At     time.Time      `json:"at"` // zero means now
	From   State          `json:"from,omitempty"`
	To     State          `json:"to,omitempty"`
	Detail map[string]any `json:"detail,omitempty"`
}

// ListOptions filters ListIncidents.
type ListOptions struct {
	OpenOnly bool   // only unfinished incidents (not resolved, failed or unrecoverable)
	Store    string // only this store's incidents
	State    State  // only incidents in this state
}
