package recovery

import (
	"database/sql"
	"math"

	"github.com/stateguard/stateguard/internal/pyjson"
	"github.com/stateguard/stateguard/store"
)

// Hermes refuses to persist a timestamp outside this window (1970 to about
// 2103) and writes the current time instead.
const (
	epochMin = 0.0
	epochMax = 4_200_000_000.0
)

// ascii is json.dumps' default, which Hermes uses for the JSON columns.
var ascii = pyjson.DumpOptions{EnsureASCII: true}

// recordMessage turns a record into the row Hermes' append_message would
// write for it, display_identity included where its rule is known. now
// is the timestamp for a record without a usable one.
func recordMessage(sid string, r Record, now float64) store.Message {
	get := func(k string) pyjson.Value { v, _ := r.Get(k); return v }
	role := get("role")
	m := store.Message{
		SessionID:         sid,
		Role:              pyjson.ScrubSurrogates(role.Str),
		Content:           bindText(get("content")),
		ToolName:          bindText(get("tool_name")),
		ToolCallID:        bindText(get("tool_call_id")),
		Timestamp:         sql.NullFloat64{Float64: storedTimestamp(r, now), Valid: true},
		FinishReason:      bindText(get("finish_reason")),
		Reasoning:         bindText(get("reasoning")),
		ReasoningContent:  bindText(get("reasoning_content")),
		Observed:          sql.NullInt64{Int64: 0, Valid: true},
		CompressedSummary: sql.NullInt64{Int64: boolInt(get("_compressed_summary").Truthy()), Valid: true},
		Active:            sql.NullInt64{Int64: 1, Valid: true},
		APIContent:        onlyStr(get("api_content")),
		DisplayKind:       onlyStr(get("display_kind")),
	}
	// json.dumps(tool_calls) if tool_calls else None
	if calls := get("tool_calls"); calls.Truthy() {
		m.ToolCalls = sql.NullString{String: calls.Dumps(ascii), Valid: true}
	}
	// Structured reasoning: falsy is None, a str is kept, else dumped.
	m.ReasoningDetails = jsonText(get("reasoning_details"))
	m.CodexReasoningItems = jsonText(get("codex_reasoning_items"))
	m.CodexMessageItems = jsonText(get("codex_message_items"))
	if pm := get("platform_message_id"); pm.Truthy() {
		m.PlatformMessageID = bindText(pm)
	}
	// Always an object here: it carries the recovery id.
	if meta := get("display_metadata"); meta.Truthy() {
		m.DisplayMetadata = sql.NullString{String: meta.Dumps(ascii), Valid: true}
	}
	m.DisplayIdentity = store.DisplayIdentity(&m)
	return m
}

// storedTimestamp is Hermes' _coerce_timestamp of the record's finite
// timestamp: kept inside the sane epoch window (-0.0 stored as 0.0), else
// now.
func storedTimestamp(r Record, now float64) float64 {
	ts, ok := finiteTimestamp(r.Get("timestamp"))
	if !ok || ts < epochMin || ts > epochMax {
		return now
	}
	if ts == 0 {
		return 0
	}
	return ts
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// bindText is the text a TEXT column ends up holding when Hermes binds the
// value: str as-is (lone surrogates scrubbed, as Hermes scrubs them), None
// as NULL, a bool as 1/0 and a number as its decimal text (SQLite's TEXT
// affinity converts the bound number). A list or dict, which sqlite3
// cannot bind and so fails Hermes' import, is stored as its JSON text.
func bindText(v pyjson.Value) sql.NullString {
	switch v.Kind {
	case pyjson.KindNull:
		return sql.NullString{}
	case pyjson.KindStr:
		return sql.NullString{String: pyjson.ScrubSurrogates(v.Str), Valid: true}
	case pyjson.KindBool:
		if v.Bool {
			return sql.NullString{String: "1", Valid: true}
		}
		return sql.NullString{String: "0", Valid: true}
	case pyjson.KindFloat:
		if math.IsNaN(v.Float) || math.IsInf(v.Float, 0) {
			return sql.NullString{String: pyjson.FloatJSON(v.Float), Valid: true}
		}
		return sql.NullString{String: pyjson.FloatRepr(v.Float), Valid: true}
	}
	return sql.NullString{String: v.Dumps(ascii), Valid: true}
}

// onlyStr keeps a str and drops anything else, as Hermes does for
// api_content and display_kind.
func onlyStr(v pyjson.Value) sql.NullString {
	if v.Kind != pyjson.KindStr {
		return sql.NullString{}
	}
	return sql.NullString{String: pyjson.ScrubSurrogates(v.Str), Valid: true}
}

// jsonText is Hermes' _reasoning_json_text.
func jsonText(v pyjson.Value) sql.NullString {
	switch {
	case !v.Truthy():
		return sql.NullString{}
	case v.Kind == pyjson.KindStr:
		return sql.NullString{String: pyjson.ScrubSurrogates(v.Str), Valid: true}
	}
	return sql.NullString{String: v.Dumps(ascii), Valid: true}
}
