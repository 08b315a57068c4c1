//go:build unix

package recovery

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stateguard/stateguard/store"
)

// Names inside a profile home: diverted transcripts go under
// <home>/sessions/recovered/<incident-id>/, never into Hermes' own
// <home>/sessions/<session_id>.jsonl.
const (
	divertSessionsDir  = "sessions"
	divertRecoveredDir = "recovered"
	// DivertPreReplacementDir holds the rows a restore rolled back on
	// purpose: listed, replayed only when asked.
	DivertPreReplacementDir = "pre-replacement"
	// DivertManifestName is the marker of a finished divert: an incident
	// directory without it was never published.
	DivertManifestName  = "divert.json"
	divertStagingSuffix = ".partial"
)

// ErrDivertDamaged marks a published divert whose files no longer match
// its divert.json.
var ErrDivertDamaged = errors.New("divert output damaged")

// ErrDivertMismatch means the incident already has a divert made with a
// different kind or replacement time.
var ErrDivertMismatch = errors.New("incident already diverted differently")

// DivertRequest says what to divert and where.
type DivertRequest struct {
	// Capture is the capture directory (stateguard's or Hermes'). It is
	// validated with OpenCapture and only ever copied, never opened with
	// SQLite.
	Capture string
	// Store is the healthy store (state.db), read read-only.
	Store string
	// IncidentID names the output directory; a plain name.
	IncidentID string
	// Kind is KindReplaced, KindSidecarLost, KindMispaired or KindRewritten.
	Kind string
	// ReplacedAt is when the main was replaced (KindReplaced,
	// KindMispaired and KindRewritten, required there: each is a restore
	// of the main):
	// missing rows stamped after it are the orphan's writes and replayed;
	// missing rows stamped at or before it were rolled back by the
	// restore and go to pre-replacement/.
	ReplacedAt time.Time
	// Cut, when set (replaced and mispaired incidents the agent saw
	// happen), is the exact replacement point in the orphan's WAL: a
	// missing row is pre-replacement only if the orphan had committed it
	// by the cut and it is stamped at or before Cut.At. When the capture
	// cannot show its state at the cut, ReplacedAt's rule applies.
	Cut *FrameCut
	// ProfileHome is where sessions/recovered/ lives; default the store's
	// directory (a profile's home holds its state.db).
	ProfileHome string
	// Owner of the written directories and files; nil means the owner Dir
	// records, else the owner of the store file.
	Owner *Owner
	// Dir is the profile directory (ProfileHome) as discovery recorded it;
	// the divert is refused unless it is still that inode and owner.
	Dir store.DirID
	// TmpDir receives the capture's private copy, removed afterwards;
	// default os.TempDir().
	TmpDir string
	// Queued are the ids of the store's other unfinished incidents. The
	// rows their diverts hold count as present: their replays write them
	// (see queuedRows).
	Queued []string
	// HermesLines are Hermes' own diverted lines queued with the incident;
	// their records count as present too (divert_hermes.go).
	HermesLines []HermesLines
	Logger      *slog.Logger // nil: slog.Default()

	cutNote string                     // how the diff told the rows apart, for the report
	queued  map[string][]store.Message // Queued's rows by session, read by divertWith
}

// ErrCaptureUnpaired means a capture's WAL does not fit its main (the
// main was rewritten in place, or a restore left a foreign WAL): SQLite
// reads the pair as a malformed database. Its rows can still be read
// from the WAL's own page images (DivertWALImages).
var ErrCaptureUnpaired = errors.New("capture's WAL does not fit its main")

// DivertReport is what a divert wrote. It is also what divert.json in the
// incident directory records, so a re-run returns it unchanged.
type DivertReport struct {
	IncidentID string
	Kind       string
	ReplacedAt time.Time // zero unless Kind is replaced
	// Cut is the request's frame cut; CutNote says which rule split the
	// rows: the frame cut, or the timestamps and why.
	Cut     *FrameCut
	CutNote string
	Capture string // the capture directory
	Store   string // the healthy store the rows were diffed against
	Dir     string // <home>/sessions/recovered/<incident-id>
	Files   []DivertFile
	// Sessions is how many sessions the capture has messages in.
	Sessions int
	// CaptureRows is every message of the capture; HealthyRows the healthy
	// store's messages in the same sessions.
	CaptureRows, HealthyRows int
	// ReplayRows and PreReplacementRows are the rows written to the
	// replay files and to pre-replacement/.
	ReplayRows, PreReplacementRows int
	// Unreplayable are missing rows left out of every file because a
	// replay (Hermes' or ours) would drop them anyway: null or blank
	// content and no tool call.
	Unreplayable int
	// Existing: the incident had been diverted before and this report was
	// read back from its divert.json; nothing was written.
	Existing bool
}

// DivertFile is one diverted JSONL, one per session and set.
type DivertFile struct {
	SessionID string
	Path      string // absolute
	Rows      int
	// PreReplacement: rows the restore rolled back (under
	// pre-replacement/); replay them only when the operator asks.
	PreReplacement bool
	// NewSession: the healthy store has no such session. Session is then
	// the capture's row for it (nil when the capture had none), for the
	// replay to create the session with its real columns.
	NewSession bool
	Session    *store.Session
	Bytes      int64
	SHA256     string
}

// ReplayOptions are the options that replay this file into its session:
// the session id given explicitly (a file name may be escaped) and the
// capture's session row as the template for a missing session.
func (f DivertFile) ReplayOptions() ReplayOptions {
	return ReplayOptions{SessionID: f.SessionID, Session: f.Session}
}

// ReplayFiles are the files to replay: the post-replacement ones, plus the
// pre-replacement ones when includePre is set.
func (r DivertReport) ReplayFiles(includePre bool) []DivertFile {
	var out []DivertFile
	for _, f := range r.Files {
		if !f.PreReplacement || includePre {
			out = append(out, f)
		}
	}
	return out
}

func (r *DivertRequest) logger() *slog.Logger {
	l := r.Logger
	if l == nil {
		l = slog.Default()
	}
	return l.With("subsystem", "recovery")
}

var incidentIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$`)

func (r *DivertRequest) check() error {
	if r.Capture == "" || r.Store == "" {
		return errors.New("divert: a capture directory and the healthy store are required")
	}
	if !incidentIDPattern.MatchString(r.IncidentID) || strings.Contains(r.IncidentID, "..") {
		return fmt.Errorf("divert: incident id %q is not a plain name (letters, digits, . _ : + -, up to 128)", r.IncidentID)
	}
	switch r.Kind {
	case KindReplaced, KindMispaired, KindRewritten:
		if r.ReplacedAt.IsZero() {
			return fmt.Errorf("divert %s: kind %s needs the replacement time, to tell the orphan's rows from the ones the restore rolled back", r.IncidentID, r.Kind)
		}
	case KindSidecarLost:
		r.ReplacedAt, r.Cut = time.Time{}, nil
	default:
		return fmt.Errorf("divert %s: unknown kind %q (want %s, %s, %s or %s)", r.IncidentID, r.Kind, KindReplaced, KindSidecarLost, KindMispaired, KindRewritten)
	}
	for _, p := range []*string{&r.Capture, &r.Store, &r.ProfileHome} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("divert %s: %w", r.IncidentID, err)
		}
		*p = abs
	}
	if r.ProfileHome == "" {
		r.ProfileHome = filepath.Dir(r.Store)
	}
	return nil
}

// divertFileName is <session_id>.jsonl, so the file's stem is the session
// id as Hermes derives it. An id that cannot be a file name (a slash, a
// leading dot, control bytes, too long) gets a hashed name instead; its
// replay then passes the session id explicitly.
func divertFileName(sid string) string {
	ok := sid != "" && len(sid) <= 200 && utf8.ValidString(sid) && !strings.HasPrefix(sid, ".") &&
		!strings.ContainsFunc(sid, func(r rune) bool { return r == '/' || r == '\\' || r < 0x20 || r == 0x7f })
	if ok {
		return sid + ".jsonl"
	}
	return "session-" + sha256Hex([]byte(sid))[:32] + ".jsonl"
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
