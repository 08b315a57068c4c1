//go:build unix

package recovery

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"time"

	"github.com/stateguard/stateguard/store"
)

const divertManifestVersion = 1

// divertManifest is divert.json: written last into the staging directory,
// so its presence in a published incident directory means every file it
// lists was complete before the directory was renamed into place.
type divertManifest struct {
	Version            int                  `json:"version"`
	IncidentID         string               `json:"incident_id"`
	Kind               string               `json:"kind"`
	ReplacedAt         string               `json:"replaced_at,omitempty"` // RFC 3339, nanoseconds
	WALCut             *FrameCut            `json:"wal_cut,omitempty"`
	Cut                string               `json:"cut,omitempty"` // which rule split the rows, and why
	Capture            string               `json:"capture"`
	Store              string               `json:"store"`
	CreatedAt          string               `json:"created_at"`
	Sessions           int                  `json:"sessions"`
	CaptureRows        int                  `json:"capture_rows"`
	HealthyRows        int                  `json:"healthy_rows"`
	ReplayRows         int                  `json:"replay_rows"`
	PreReplacementRows int                  `json:"pre_replacement_rows"`
	Unreplayable       int                  `json:"unreplayable_rows"`
	Files              []divertManifestFile `json:"files"`
}

type divertManifestFile struct {
	SessionID      string         `json:"session_id"`
	File           string         `json:"file"` // relative to the incident directory
	Rows           int            `json:"rows"`
	PreReplacement bool           `json:"pre_replacement"`
	NewSession     bool           `json:"new_session"`
	Session        *divertSession `json:"session,omitempty"`
	Bytes          int64          `json:"bytes"`
	SHA256         string         `json:"sha256"`
}

// divertSession is a store.Session as JSON: one key per column that is
// set, so a null stays null and an unset column stays absent.
type divertSession struct {
	ID                      string   `json:"id"`
	Source                  string   `json:"source"`
	UserID                  *string  `json:"user_id,omitempty"`
	Model                   *string  `json:"model,omitempty"`
	ModelConfig             *string  `json:"model_config,omitempty"`
	ParentSessionID         *string  `json:"parent_session_id,omitempty"`
	StartedAt               *float64 `json:"started_at,omitempty"`
	EndedAt                 *float64 `json:"ended_at,omitempty"`
	EndReason               *string  `json:"end_reason,omitempty"`
	MessageCount            *int64   `json:"message_count,omitempty"`
	ToolCallCount           *int64   `json:"tool_call_count,omitempty"`
	Title                   *string  `json:"title,omitempty"`
	LastActivityAt          *float64 `json:"last_activity_at,omitempty"`
	LastActivityDescription *string  `json:"last_activity_description,omitempty"`
	LastActivityProvenance  *string  `json:"last_activity_provenance,omitempty"`
	Archived                *int64   `json:"archived,omitempty"`
	ProfileName             *string  `json:"profile_name,omitempty"`
	AutoArchived            *int64   `json:"auto_archived,omitempty"`
}

func nsOut(s sql.NullString) *string {
	if !s.Valid {
		return nil
	}
	return &s.String
}

func nfOut(f sql.NullFloat64) *float64 {
	if !f.Valid {
		return nil
	}
	return &f.Float64
}

func niOut(i sql.NullInt64) *int64 {
	if !i.Valid {
		return nil
	}
	return &i.Int64
}

func nsIn(p *string) sql.NullString {
	if p == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: *p, Valid: true}
}

func nfIn(p *float64) sql.NullFloat64 {
	if p == nil {
		return sql.NullFloat64{}
	}
	return sql.NullFloat64{Float64: *p, Valid: true}
}

func niIn(p *int64) sql.NullInt64 {
	if p == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: *p, Valid: true}
}

func sessionOut(s *store.Session) *divertSession {
	if s == nil {
		return nil
	}
	return &divertSession{
		ID: s.ID, Source: s.Source, UserID: nsOut(s.UserID), Model: nsOut(s.Model),
		ModelConfig: nsOut(s.ModelConfig), ParentSessionID: nsOut(s.ParentSessionID),
		StartedAt: nfOut(s.StartedAt), EndedAt: nfOut(s.EndedAt), EndReason: nsOut(s.EndReason),
		MessageCount: niOut(s.MessageCount), ToolCallCount: niOut(s.ToolCallCount),
		Title: nsOut(s.Title), LastActivityAt: nfOut(s.LastActivityAt),
		LastActivityDescription: nsOut(s.LastActivityDescription),
		LastActivityProvenance:  nsOut(s.LastActivityProvenance),
		Archived:                niOut(s.Archived), ProfileName: nsOut(s.ProfileName),
		AutoArchived: niOut(s.AutoArchived),
	}
}

func sessionIn(d *divertSession) *store.Session {
	if d == nil {
		return nil
	}
	return &store.Session{
		ID: d.ID, Source: d.Source, UserID: nsIn(d.UserID), Model: nsIn(d.Model),
		ModelConfig: nsIn(d.ModelConfig), ParentSessionID: nsIn(d.ParentSessionID),
		StartedAt: nfIn(d.StartedAt), EndedAt: nfIn(d.EndedAt), EndReason: nsIn(d.EndReason),
		MessageCount: niIn(d.MessageCount), ToolCallCount: niIn(d.ToolCallCount),
		Title: nsIn(d.Title), LastActivityAt: nfIn(d.LastActivityAt),
		LastActivityDescription: nsIn(d.LastActivityDescription),
		LastActivityProvenance:  nsIn(d.LastActivityProvenance),
		Archived:                niIn(d.Archived), ProfileName: nsIn(d.ProfileName),
		AutoArchived: niIn(d.AutoArchived),
	}
}

func (r *DivertReport) manifest(created time.Time) *divertManifest {
	m := &divertManifest{
		Version: divertManifestVersion, IncidentID: r.IncidentID, Kind: r.Kind,
		Capture: r.Capture, Store: r.Store, CreatedAt: created.UTC().Format(time.RFC3339Nano),
		Sessions: r.Sessions, CaptureRows: r.CaptureRows, HealthyRows: r.HealthyRows,
		ReplayRows: r.ReplayRows, PreReplacementRows: r.PreReplacementRows, Unreplayable: r.Unreplayable,
		Files: []divertManifestFile{}, WALCut: r.Cut, Cut: r.CutNote,
	}
	if !r.ReplacedAt.IsZero() {
		m.ReplacedAt = r.ReplacedAt.UTC().Format(time.RFC3339Nano)
	}
	for _, f := range r.Files {
		rel, _ := filepath.Rel(r.Dir, f.Path)
		m.Files = append(m.Files, divertManifestFile{
			SessionID: f.SessionID, File: filepath.ToSlash(rel), Rows: f.Rows,
			PreReplacement: f.PreReplacement, NewSession: f.NewSession,
			Session: sessionOut(f.Session), Bytes: f.Bytes, SHA256: f.SHA256,
		})
	}
	return m
}

// report turns a divert.json read from dir back into the report.
func (m *divertManifest) report(dir string) (DivertReport, error) {
	if m.Version != divertManifestVersion {
		return DivertReport{}, fmt.Errorf("%s: version %d, this stateguard reads %d", filepath.Join(dir, DivertManifestName), m.Version, divertManifestVersion)
	}
	r := DivertReport{
		IncidentID: m.IncidentID, Kind: m.Kind, Capture: m.Capture, Store: m.Store, Dir: dir,
		Sessions: m.Sessions, CaptureRows: m.CaptureRows, HealthyRows: m.HealthyRows,
		ReplayRows: m.ReplayRows, PreReplacementRows: m.PreReplacementRows, Unreplayable: m.Unreplayable,
		Cut: m.WALCut, CutNote: m.Cut,
	}
	if m.ReplacedAt != "" {
		t, err := time.Parse(time.RFC3339Nano, m.ReplacedAt)
		if err != nil {
			return DivertReport{}, fmt.Errorf("%s: replaced_at: %w", filepath.Join(dir, DivertManifestName), err)
		}
		r.ReplacedAt = t
	}
	for _, f := range m.Files {
		if !filepath.IsLocal(filepath.FromSlash(f.File)) {
			return DivertReport{}, fmt.Errorf("%s: file %q is not inside the incident directory", filepath.Join(dir, DivertManifestName), f.File)
		}
		r.Files = append(r.Files, DivertFile{
			SessionID: f.SessionID, Path: filepath.Join(dir, filepath.FromSlash(f.File)), Rows: f.Rows,
			PreReplacement: f.PreReplacement, NewSession: f.NewSession, Session: sessionIn(f.Session),
			Bytes: f.Bytes, SHA256: f.SHA256,
		})
	}
	return r, nil
}
