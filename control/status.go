package control

import (
	"fmt"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// StatusVersion is the version of the Status JSON shape. Fields are only
// ever added; a change that breaks readers bumps it. StatusVersionMinor
// counts the additions: 1 added the verdict rule, the uninspected
// summary, and per held file its evidence, access and host path.
const (
	StatusVersion      = 1
	StatusVersionMinor = 1
)

// Status is what `agentctl status` shows, standalone or from the daemon.
type Status struct {
	Version      int             `json:"version"`
	VersionMinor int             `json:"version_minor"`
	GeneratedAt  time.Time       `json:"generated_at"`
	Daemon       DaemonStatus    `json:"daemon"`
	Stores       []StoreStatus   `json:"stores"`
	Problems     []ProblemStatus `json:"problems"`
	Queue        QueueStatus     `json:"queue"`
}

// DaemonStatus says whether agentd answered, and about itself.
type DaemonStatus struct {
	Running   bool      `json:"running"`
	PID       int       `json:"pid,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"`
	StateDir  string    `json:"state_dir,omitempty"`
	Socket    string    `json:"socket,omitempty"`
	// Error says why the daemon is not reachable ("daemon not running").
	Error string `json:"error,omitempty"`
}

// StoreStatus is one store's line in the table.
type StoreStatus struct {
	Key        string           `json:"key"`
	Profile    string           `json:"profile"`
	Home       string           `json:"home"`
	Path       string           `json:"path"`
	Kind       string           `json:"kind"`
	Generation GenerationStatus `json:"generation"`
	// Verdict is the holder scan's: clear, held or unknown, by Rule.
	Verdict holders.Verdict   `json:"verdict"`
	Rule    holders.Rule      `json:"rule"`
	Holders []holders.Process `json:"holders"`
	// Blind are the processes the scan could not inspect that keep the
	// verdict from being clear; Uninspected those the rule cleared.
	Blind       []holders.Blind     `json:"blind"`
	Uninspected holders.Uninspected `json:"uninspected"`
	RuleNote    string              `json:"rule_note,omitempty"`
	// Orphans counts holders of an inode no longer at its path.
	Orphans   int               `json:"orphans"`
	Guard     *GuardStatus      `json:"guard,omitempty"`
	Incidents []IncidentSummary `json:"incidents"`
	// QueuedReplays counts this store's replay jobs not yet done.
	QueuedReplays int    `json:"queued_replays"`
	Error         string `json:"error,omitempty"`
	// HermesDiverts are Hermes' own diverted JSONL files with records the
	// store lacks (hermes_divert.go).
	HermesDiverts []HermesDivert `json:"hermes_diverts,omitempty"`
}

// GenerationStatus is a store's generation identity as reported.
type GenerationStatus struct {
	Main          FileStatus `json:"main"`
	WAL           FileStatus `json:"wal"`
	SHM           FileStatus `json:"shm"`
	WALSalts      string     `json:"wal_salts,omitempty"`
	CheckpointSeq uint32     `json:"checkpoint_seq,omitempty"`
	ApplicationID uint32     `json:"application_id,omitempty"`
}

// FileStatus is one file as the status document shows it: its identity
// (dev, ino; left out for a file that is not there), size and links.
type FileStatus struct {
	Exists bool `json:"exists"`
	*fileid.ID
	Size  int64  `json:"size,omitempty"`
	Nlink uint64 `json:"nlink,omitempty"`
}

// GuardStatus is the prevention guard's state for a store.
type GuardStatus struct {
	State  string    `json:"state"` // armed, paused, off, unavailable
	Until  time.Time `json:"until,omitzero"`
	Reason string    `json:"reason,omitempty"`
}

// IncidentSummary is an incident in the status table.
type IncidentSummary struct {
	ID       string        `json:"id"`
	Kind     journal.Kind  `json:"kind"`
	State    journal.State `json:"state"`
	Policy   string        `json:"policy"`
	OpenedAt time.Time     `json:"opened_at"`
	Capture  string        `json:"capture,omitempty"`
	Error    string        `json:"error,omitempty"`
}

// ProblemStatus is a discovery problem (a symlinked state.db, ...).
type ProblemStatus struct {
	Path  string `json:"path"`
	Error string `json:"error"`
	Hint  string `json:"hint,omitempty"`
}

// QueueStatus counts replay jobs by state.
type QueueStatus struct {
	Queued  int `json:"queued"`
	Running int `json:"running"`
	Failed  int `json:"failed"`
	Done    int `json:"done"`
}

// BuildStatus assembles the daemon-independent part of a status: the
// stores, their generations and a holder scan.
func BuildStatus(stores []store.Store, problems []store.Problem, scan *holders.Result) Status {
	st := Status{Version: StatusVersion, VersionMinor: StatusVersionMinor, GeneratedAt: time.Now().UTC(),
		Stores: []StoreStatus{}, Problems: []ProblemStatus{}}
	for _, s := range stores {
		ss := StoreStatus{
			Key: s.Key(), Profile: s.Profile, Home: s.Home, Path: s.Path, Kind: s.Kind.String(),
			Holders: []holders.Process{}, Blind: []holders.Blind{}, Incidents: []IncidentSummary{},
		}
		gen, err := s.ReadGeneration() // through the directory handle discovery recorded
		if err != nil {
			ss.Error = err.Error()
		}
		ss.Generation = generationStatus(gen)
		if sr := scanFor(scan, s.Path); sr != nil {
			ss.Verdict, ss.Rule = sr.Verdict, sr.Rule
			ss.Uninspected, ss.RuleNote = sr.Uninspected, sr.RuleNote
			if sr.Holders != nil {
				ss.Holders = sr.Holders
			}
			if sr.Blind != nil {
				ss.Blind = sr.Blind
			}
			ss.Orphans = len(sr.Orphans())
		} else {
			ss.Verdict = holders.VerdictUnknown
		}
		// Arrays, never null, in the document.
		if ss.Uninspected.UIDs == nil {
			ss.Uninspected.UIDs = []int{}
		}
		if ss.Uninspected.Pids == nil {
			ss.Uninspected.Pids = []int{}
		}
		st.Stores = append(st.Stores, ss)
	}
	for _, p := range problems {
		st.Problems = append(st.Problems, ProblemStatus{Path: p.Path, Error: p.Err.Error(), Hint: p.Hint})
	}
	return st
}

func scanFor(r *holders.Result, path string) *holders.StoreResult {
	if r == nil {
		return nil
	}
	return r.Store(path)
}

func generationStatus(g store.Generation) GenerationStatus {
	fs := func(f fileid.State) FileStatus {
		if !f.Exists {
			return FileStatus{}
		}
		return FileStatus{Exists: true, ID: &f.ID, Size: f.Size, Nlink: f.Nlink}
	}
	gs := GenerationStatus{Main: fs(g.Main), WAL: fs(g.WAL), SHM: fs(g.SHM), ApplicationID: g.AppID}
	if h := g.WALHeader; h != nil {
		gs.WALSalts = fmt.Sprintf("%08x:%08x", h.Salt1, h.Salt2)
		gs.CheckpointSeq = h.CheckpointSeq
	}
	return gs
}
