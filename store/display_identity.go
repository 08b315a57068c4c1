package store

import (
	"crypto/sha256"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/stateguard/stateguard/internal/pyrepr"
)

// carrierMarkers are the words that start Hermes' context-compaction
// handoff texts ("[CONTEXT COMPACTION — REFERENCE ONLY]", "[CONTEXT
// SUMMARY]:", a merged "[PRIOR CONTEXT …]"). A user row holding one may be
// a carrier whose identity Hermes keys on the live ask inside it, which is
// not reproduced here.
var carrierMarkers = []string{"CONTEXT COMPACTION", "CONTEXT SUMMARY", "PRIOR CONTEXT"}

// DisplayIdentity is the messages.display_identity Hermes' append_message
// writes for m: SHA-256 of Python's repr() of (role, content, timestamp,
// tool_call_id, tool_calls, tool_name) as bound into the insert, UTF-8.
// It is computed only where that rule is known to be what Hermes does:
// a user or assistant row with text content, a finite timestamp and no
// tool call id, tool calls or tool name. Everything else gets nil, a NULL
// that Hermes fills in itself on its next read of the session (a wrong
// value would never be corrected): tool rows and rows with tool calls,
// whose key newer Hermes versions take from the call ids; compaction
// summaries and user rows that may be handoff carriers (keyed on the live
// ask they carry); and text whose repr a Python newer than 3.11 might
// write differently (see pyrepr.Unstable).
func DisplayIdentity(m *Message) []byte {
	if (m.Role != "user" && m.Role != "assistant") || !m.Content.Valid || !m.Timestamp.Valid ||
		m.ToolCallID.Valid || m.ToolCalls.Valid || m.ToolName.Valid ||
		(m.CompressedSummary.Valid && m.CompressedSummary.Int64 != 0) {
		return nil
	}
	ts := m.Timestamp.Float64
	if math.IsNaN(ts) || math.IsInf(ts, 0) {
		return nil
	}
	if ts == 0 {
		ts = 0 // SQLite reads -0.0 back as 0.0, and Hermes hashes that
	}
	content := m.Content.String
	if !utf8.ValidString(content) || pyrepr.Unstable(content) {
		return nil
	}
	if m.Role == "user" {
		upper := strings.ToUpper(content)
		for _, mk := range carrierMarkers {
			if strings.Contains(upper, mk) {
				return nil
			}
		}
	}
	key := pyrepr.Tuple(pyrepr.Str(m.Role), pyrepr.Str(content), pyrepr.Float(ts), pyrepr.None, pyrepr.None, pyrepr.None)
	sum := sha256.Sum256([]byte(key))
	return sum[:]
}
