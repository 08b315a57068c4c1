package recovery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/stateguard/stateguard/internal/pyjson"
	"github.com/stateguard/stateguard/store"
)

// ErrCompressedSession means the target session was closed by a context
// compression: Hermes refuses to append to it (its history continues in a
// child session), and so does replay.
var ErrCompressedSession = errors.New("session was closed by compression")

// ReplayOptions tune a replay.
type ReplayOptions struct {
	// SessionID is the session to replay into; default the JSONL file's
	// stem, as Hermes does.
	SessionID string

	// Session, when set, is the row to create a missing session from (a
	// capture's own row for it) instead of Hermes' bare source 'cli'
	// session. Its id and counters are not used: the session gets the
	// target id, and the counters count the rows the replay appends.
	Session *store.Session

	// FromLine, when > 0, replays only the records of lines from this one
	// on (1-based). The recovery ids still chain from the file's first
	// line, so they equal what Hermes computes for the whole file: a
	// Hermes process's own divert file can be replayed from where an
	// incident opened, and `hermes sessions import` on it later matches
	// those rows instead of duplicating them.
	FromLine int

	// Input, when set, is where the JSONL must come from (the daemon's
	// replays on a profile's behalf): see ReplayInput.
	Input ReplayInput

	// StoreDir is the store's directory as the operator's path resolved
	// to (store.Store.DirID): the store is opened through a handle on the
	// directory, never through a symlink, and refused when the directory
	// is another one (zero: not compared). Input.Dir replaces it for a
	// checked input.
	StoreDir store.DirID

	// CheckpointGate, when set, is asked before the replay's checkpoint
	// (store.Writable.SetCheckpointGate): the daemon's worker refuses it
	// while a foreign process has the main open for writing.
	CheckpointGate store.CheckpointGate
}

// ReplayReport says what a replay found and did.
type ReplayReport struct {
	Path      string // the resolved JSONL path, which seeds the recovery ids
	SessionID string
	Lines     int // non-blank lines
	Records   int // lines that became records
	// Issues are the lines that did not become records (invalid, or
	// dropped by Hermes' blank-content rule), in file order.
	Issues []LineIssue
	// Repaired are lines that held invalid UTF-8; they were replayed with
	// U+FFFD in place of the bad bytes, as Hermes reads them.
	Repaired       []int
	SessionCreated bool
	AlreadyPresent int     // leading records found in the store
	Appended       int     // records appended
	AppendedIDs    []int64 // the new rows, in order
}

// Partial reports whether some line was skipped or altered: the replay did
// what it could, but the file did not come through whole.
func (r ReplayReport) Partial() bool { return len(r.Issues) > 0 || len(r.Repaired) > 0 }

// SessionIDFor is the session a JSONL replays into: id when given (with
// surrounding whitespace removed, as Hermes strips it), else the file
// name's stem as Python's Path.stem has it.
func SessionIDFor(jsonlPath, id string) string {
	if id = strings.TrimSpace(id); id != "" {
		return id
	}
	name := filepath.Base(jsonlPath)
	if i := strings.LastIndexByte(name, '.'); i > 0 && i < len(name)-1 {
		return name[:i]
	}
	return name
}

// loadDiverted reads and parses the operator's JSONL (Inspect) and
// computes its recovery ids. It only ever opens the file read-only, once
// (openOperatorInput).
func loadDiverted(jsonlPath string, opts ReplayOptions) (string, string, Diverted, error) {
	sid := SessionIDFor(jsonlPath, opts.SessionID)
	if sid == "" {
		return "", "", Diverted{}, fmt.Errorf("replay %s: no session id: give one, or name the file <session_id>.jsonl", jsonlPath)
	}
	f, resolved, err := openOperatorInput(jsonlPath)
	if err != nil {
		return "", "", Diverted{}, err
	}
	defer f.Close()
	d, err := ParseDiverted(f)
	if err != nil {
		return "", "", d, fmt.Errorf("read diverted transcript %s: %w", resolved, err)
	}
	AssignRecoveryIDs(resolved, d.Records)
	return resolved, sid, d, nil
}

// ReplayFile opens the store at dbPath writable (see store.OpenWritable),
// replays jsonlPath into it and closes it. The file is streamed: memory
// does not grow with its size (replayStream).
//
// A replay appends the records of a diverted JSONL that the session does
// not have yet, exactly once, by Hermes' algorithm: create the session
// (source cli) if missing; give every record its recovery id; skip the
// longest prefix of records already in the session, walking its rows in
// id order with one forward-only cursor (a row with a recovery id matches
// only that id; a legacy row matches a record with an equal finite
// timestamp and equal role, content, tool_call_id, tool_name and
// tool_calls); append the rest with all their fields. Unlike Hermes, the
// whole job is one transaction: a retry never duplicates and a failure
// never half-applies. The JSONL is only read, never modified or deleted.
func ReplayFile(ctx context.Context, dbPath, jsonlPath string, opts ReplayOptions) (ReplayReport, error) {
	if opts.Input.set() {
		return replayFileStreaming(ctx, dbPath, jsonlPath, opts)
	}
	return replayOperatorFile(ctx, dbPath, jsonlPath, opts)
}

// ensureSession creates a missing session, from the template when there
// is one, else as Hermes' import does (source cli, started now). It
// reports whether an existing session was closed by compression, which
// Hermes never appends to.
func ensureSession(tx *store.Tx, sid string, template *store.Session) (created, closed bool, err error) {
	s, err := store.ReadSession(tx.Context(), tx, sid)
	switch {
	case errors.Is(err, store.ErrNoSession):
		n := store.Session{ID: sid, Source: "cli"}
		if template != nil {
			n = *template
			n.ID = sid
			n.MessageCount = sql.NullInt64{Int64: 0, Valid: true}
			n.ToolCallCount = sql.NullInt64{Int64: 0, Valid: true}
			if n.Source == "" {
				n.Source = "cli"
			}
		}
		return true, false, tx.CreateSession(n)
	case err != nil:
		return false, false, err
	}
	return false, s.EndedAt.Valid && s.EndReason.Valid && s.EndReason.String == "compression", nil
}

// alreadyPersisted is how many leading records the destination already
// has, in its id order with other rows allowed between them.
func alreadyPersisted(dest []store.Message, recs []Record) int {
	j := 0
	for i, r := range recs {
		found := false
		for j < len(dest) {
			row := &dest[j]
			j++
			if sameRow(row, r) {
				found = true
				break
			}
		}
		if !found {
			return i
		}
	}
	return len(recs)
}

// sameRow is Hermes' _same_diverted_row: a recovery id on the row is
// proof either way; a legacy row needs a finite timestamp equal to the
// record's, and equal content identity.
func sameRow(row *store.Message, r Record) bool {
	if id, ok := rowRecoveryID(row); ok {
		return id.Kind == pyjson.KindStr && id.Str == r.RecoveryID
	}
	ts, ok := finiteTimestamp(r.Get("timestamp"))
	if !ok || !row.Timestamp.Valid || row.Timestamp.Float64 != ts {
		return false
	}
	role, _ := r.Get("role")
	content, _ := r.Get("content")
	callID, _ := r.Get("tool_call_id")
	name, _ := r.Get("tool_name")
	calls, _ := r.Get("tool_calls")
	return pyjson.Equal(pyjson.String(row.Role), role) &&
		pyjson.Equal(rowContent(row.Content), content) &&
		pyjson.Equal(nullText(row.ToolCallID), callID) &&
		pyjson.Equal(nullText(row.ToolName), name) &&
		rowCallsKey(row.ToolCalls) == callsKey(calls)
}

// rowRecoveryID reads display_metadata as Hermes decodes it (up to two
// JSON string layers; anything but an object counts as none) and returns
// its diverted_recovery_id when that is not null.
func rowRecoveryID(row *store.Message) (pyjson.Value, bool) {
	if !row.DisplayMetadata.Valid {
		return pyjson.Value{}, false
	}
	meta := pyjson.String(row.DisplayMetadata.String)
	for range 2 {
		if meta.Kind != pyjson.KindStr {
			break
		}
		v, err := pyjson.Parse(meta.Str)
		if err != nil {
			return pyjson.Value{}, false
		}
		meta = v
	}
	id, ok := meta.Get(RecoveryIDKey)
	if !ok || id.Kind == pyjson.KindNull {
		return pyjson.Value{}, false
	}
	return id, true
}

func nullText(s sql.NullString) pyjson.Value {
	if !s.Valid {
		return pyjson.Value{}
	}
	return pyjson.String(s.String)
}

// Structured content is stored behind a sentinel prefix (legacy \x00,
// current \x01) and decoded by Hermes before it compares.
var contentJSONPrefixes = []string{"\x00json:", "\x01json:"}

func rowContent(s sql.NullString) pyjson.Value {
	if !s.Valid {
		return pyjson.Value{}
	}
	for _, p := range contentJSONPrefixes {
		if rest, ok := strings.CutPrefix(s.String, p); ok {
			if v, err := pyjson.Parse(rest); err == nil {
				return v
			}
		}
	}
	return pyjson.String(s.String)
}

// callsKey is json.dumps(calls, sort_keys=True) for a list, else none.
// The escaping differs from Python's ensure_ascii default, which does not
// change which keys are equal.
func callsKey(calls pyjson.Value) string {
	if calls.Kind != pyjson.KindList {
		return "\x00none"
	}
	return calls.Dumps(pyjson.DumpOptions{SortKeys: true})
}

// rowCallsKey decodes a stored tool_calls as Hermes does: non-empty text
// that is not JSON counts as an empty list.
func rowCallsKey(s sql.NullString) string {
	if !s.Valid || s.String == "" {
		return callsKey(pyjson.Value{})
	}
	v, err := pyjson.Parse(s.String)
	if err != nil {
		v = pyjson.Value{Kind: pyjson.KindList}
	}
	return callsKey(v)
}
