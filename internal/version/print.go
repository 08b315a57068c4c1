package version

import (
	"encoding/json"
	"fmt"
	"io"
)

// DocumentFormat is the version of the `version --json` document. Fields
// are only ever added; a change that breaks readers bumps it.
const DocumentFormat = 1

// Document is `agentd version --json` and `agentctl version --json`:
//
//	{
//	  "format": 1,
//	  "program": "agentd",
//	  "version": "v1.4.0",                 // see Info.Version
//	  "revision": "551b98f0a1b2...",       // "" when the build has no VCS stamp
//	  "revision_time": "2026-12-01T09:17:00Z",
//	  "modified": false,
//	  "go_version": "go1.26.0",
//	  "platform": "linux/amd64",
//	  "sqlite_version": "3.51.3",
//	  "sqlite_error": "..."                // only when SQLite could not answer
//	}
type Document struct {
	Format  int    `json:"format"`
	Program string `json:"program"`
	Info
	SQLiteError string `json:"sqlite_error,omitempty"`
}

// NewDocument is the document for program; sqliteErr is what Read
// returned.
func NewDocument(program string, i Info, sqliteErr error) Document {
	d := Document{Format: DocumentFormat, Program: program, Info: i}
	if sqliteErr != nil {
		d.SQLiteError = sqliteErr.Error()
	}
	return d
}

// WriteJSON writes d indented, as the other --json documents are.
func (d Document) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}

// WriteText writes the human form: "<program> <version>" first, which is
// all a script needs, then one line per detail.
//
//	agentd v1.4.0
//	  revision  551b98f0a1b2 (2026-12-01T09:17:00Z)
//	  go        go1.26.0 linux/amd64
//	  sqlite    3.51.3
func (d Document) WriteText(w io.Writer) error {
	rev := "unknown (no VCS information in this build)"
	if d.Revision != "" {
		rev = d.ShortRevision()
		if d.RevisionTime != "" {
			rev += " (" + d.RevisionTime + ")"
		}
		if d.Modified {
			rev += ", modified working tree"
		}
	}
	sqlite := d.SQLite
	if d.SQLiteError != "" {
		sqlite = "unknown: " + d.SQLiteError
	}
	_, err := fmt.Fprintf(w, "%s %s\n  revision  %s\n  go        %s %s\n  sqlite    %s\n",
		d.Program, d.Version, rev, d.GoVersion, d.Platform, sqlite)
	return err
}
