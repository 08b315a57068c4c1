package recovery

import (
	"database/sql"
	"strings"

	"github.com/stateguard/stateguard/internal/pyjson"
	"github.com/stateguard/stateguard/store"
)

// divertKeys are the keys of a diverted line in the order Hermes writes
// them (docs/hermes.md); _row_id follows.
var divertKeys = []string{
	"role", "content", "tool_name", "tool_calls", "tool_call_id",
	"finish_reason", "reasoning", "reasoning_content", "reasoning_details",
	"codex_reasoning_items", "codex_message_items", "_compressed_summary",
	"timestamp", "api_content", "display_kind", "display_metadata",
	"platform_message_id",
}

// divertRowIDKey carries the capture's message id, for the operator; no
// replay reads it.
const divertRowIDKey = "_row_id"

// divertLine renders a capture row as the line Hermes would have written
// for it, and reports whether a replay would keep it (Hermes' record rules
// drop a row with null or blank content and no tool call, and cannot hash
// a lone surrogate).
//
// Text columns go out as the strings they hold, so a replay stores them
// byte for byte (content with its structured-content prefix included).
// JSON columns go out as the structure Hermes had in memory when the text
// is exactly what Hermes' json.dumps wrote for it, else as the text.
func divertLine(m *store.Message) (line pyjson.Value, replayable bool) {
	line = pyjson.Value{Kind: pyjson.KindDict}
	vals := map[string]pyjson.Value{
		"role":                  pyjson.String(cleanText(m.Role)),
		"content":               divertText(m.Content),
		"tool_name":             divertText(m.ToolName),
		"tool_calls":            divertCalls(m.ToolCalls),
		"tool_call_id":          divertText(m.ToolCallID),
		"finish_reason":         divertText(m.FinishReason),
		"reasoning":             divertText(m.Reasoning),
		"reasoning_content":     divertText(m.ReasoningContent),
		"reasoning_details":     divertJSON(m.ReasoningDetails, false),
		"codex_reasoning_items": divertJSON(m.CodexReasoningItems, false),
		"codex_message_items":   divertJSON(m.CodexMessageItems, false),
		"_compressed_summary":   {Kind: pyjson.KindBool, Bool: m.CompressedSummary.Valid && m.CompressedSummary.Int64 != 0},
		"timestamp":             {},
		"api_content":           divertText(m.APIContent),
		"display_kind":          divertText(m.DisplayKind),
		"display_metadata":      divertJSON(m.DisplayMetadata, true),
		"platform_message_id":   divertText(m.PlatformMessageID),
	}
	if m.Timestamp.Valid {
		vals["timestamp"] = pyjson.Float64(m.Timestamp.Float64)
	}
	for _, k := range divertKeys {
		line.Dict = append(line.Dict, pyjson.Member{Key: k, Value: vals[k]})
	}
	line.Dict = append(line.Dict, pyjson.Member{Key: divertRowIDKey, Value: pyjson.Int64(m.ID)})

	fields, issue := buildRecord(line)
	if issue != nil || pyjson.HasSurrogate(string(IdentityJSON(fields))) {
		return line, false
	}
	return line, true
}

// cleanText is the text Python's sqlite3 would hand Hermes: invalid UTF-8
// (which Python cannot even decode from the store) replaced by U+FFFD, so
// the JSONL stays valid UTF-8.
func cleanText(s string) string {
	t, _ := pyjson.DecodeUTF8Replace([]byte(s))
	return t
}

func divertText(s sql.NullString) pyjson.Value {
	if !s.Valid {
		return pyjson.Value{}
	}
	return pyjson.String(cleanText(s.String))
}

// divertCalls is the tool_calls list; anything that is not a JSON list
// goes out as null (a replay keeps only lists).
func divertCalls(s sql.NullString) pyjson.Value {
	if !s.Valid || strings.TrimSpace(s.String) == "" {
		return pyjson.Value{}
	}
	v, err := pyjson.Parse(cleanText(s.String))
	if err != nil || v.Kind != pyjson.KindList {
		return pyjson.Value{}
	}
	return v
}

// divertJSON decodes a JSON column into the list or dict Hermes dumped
// into it, when re-dumping gives the stored text back (so a replay, which
// dumps it again, stores the same bytes); otherwise the text is kept as a
// string. dictOnly: display_metadata, where only an object is structure.
func divertJSON(s sql.NullString, dictOnly bool) pyjson.Value {
	if !s.Valid {
		return pyjson.Value{}
	}
	t := cleanText(s.String)
	v, err := pyjson.Parse(t)
	switch {
	case err != nil:
	case v.Kind == pyjson.KindDict && (dictOnly || v.Dumps(ascii) == t):
		return v
	case v.Kind == pyjson.KindList && !dictOnly && v.Dumps(ascii) == t:
		return v
	}
	return pyjson.String(t)
}

// rowKey is a row's identity for the diff: role, content, tool_call_id,
// tool_name, tool_calls and timestamp, compared the way the replay's
// legacy match compares them (content decoded from its structured prefix,
// tool_calls as sorted JSON, a falsy tool id or name as none), after the
// text clean-up a diverted line goes through, so a row that was diverted
// and replayed is found again by a later diff.
type rowKey struct {
	role, content, callID, name, calls, ts string
}

func keyOf(m *store.Message) rowKey {
	k := rowKey{
		role:    cleanText(m.Role),
		content: rowContent(cleanNull(m.Content)).Dumps(pyjson.DumpOptions{SortKeys: true}),
		callID:  truthyText(m.ToolCallID),
		name:    truthyText(m.ToolName),
		calls:   rowCallsKey(cleanNull(m.ToolCalls)),
		ts:      "none",
	}
	if m.Timestamp.Valid {
		k.ts = pyjson.FloatRepr(m.Timestamp.Float64)
	}
	return k
}

func cleanNull(s sql.NullString) sql.NullString {
	if s.Valid {
		s.String = cleanText(s.String)
	}
	return s
}

// truthyText: the replay keeps tool_call_id and tool_name only when they
// are truthy, so "" and NULL are the same identity.
func truthyText(s sql.NullString) string {
	if !s.Valid || s.String == "" {
		return "\x00none"
	}
	return "s" + cleanText(s.String)
}
