package recovery

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/stateguard/stateguard/internal/pyjson"
)

// divertedDurableFields are the columns a diverted line may carry beyond
// the identity, in Hermes' order. They are stored but never hashed, so a
// line written before they existed keeps its recovery id.
var divertedDurableFields = []string{
	"finish_reason", "reasoning", "reasoning_content", "reasoning_details",
	"codex_reasoning_items", "codex_message_items", "_compressed_summary",
	"api_content", "display_kind", "display_metadata", "platform_message_id",
}

func isDurableField(k string) bool {
	for _, f := range divertedDurableFields {
		if f == k {
			return true
		}
	}
	return false
}

// Record is one replayable line of a diverted JSONL, built by Hermes'
// record rules.
type Record struct {
	Line int // 1-based, counted as Python's universal newlines count
	// Fields is the record as Hermes builds it: role, content (a str or
	// null), tool_calls (when a list), tool_name and tool_call_id (when
	// truthy), timestamp (when not null), then each durable field the line
	// has. After AssignRecoveryIDs, display_metadata is the merged object.
	Fields pyjson.Value
	// RecoveryID is the hash chain's hex digest after this record.
	RecoveryID string
	// Repaired: the line held invalid UTF-8, replaced by U+FFFD.
	Repaired bool

	identity []byte
}

// Get returns a field of the record.
func (r Record) Get(key string) (pyjson.Value, bool) { return r.Fields.Get(key) }

// LineIssue is a line that did not become a record.
type LineIssue struct {
	Line   int
	Reason string
	// Invalid: the line is not a usable JSON object (bad JSON, not an
	// object, no role, a lone surrogate). Otherwise the line was dropped by
	// Hermes' rule for blank content without a tool graph.
	Invalid bool
}

func (l LineIssue) String() string { return fmt.Sprintf("line %d: %s", l.Line, l.Reason) }

// Diverted is a parsed diverted JSONL.
type Diverted struct {
	Lines    int // non-blank lines
	Blank    int // blank lines, ignored as Hermes ignores them
	Records  []Record
	Issues   []LineIssue // invalid and dropped lines, in file order
	Repaired []int       // lines whose invalid UTF-8 was replaced by U+FFFD
}

// Invalid returns the issues that are invalid lines.
func (d Diverted) Invalid() []LineIssue {
	var out []LineIssue
	for _, l := range d.Issues {
		if l.Invalid {
			out = append(out, l)
		}
	}
	return out
}

// maxLine bounds one line so a corrupt file cannot take all memory. Hermes
// has no bound; nothing it writes comes near this.
const maxLine = 512 << 20

// ParseDiverted parses a diverted JSONL the way Hermes reads it: text
// decoded as UTF-8 with errors="replace", lines split by universal newlines
// (\n, \r\n and a lone \r all end a line), each line json.loads'ed; lines
// that are not JSON objects are skipped, and the rest go through Hermes'
// record rules (see buildRecord).
func ParseDiverted(r io.Reader) (Diverted, error) {
	var recs []Record
	d, err := scanDiverted(r, maxLine, func(rec Record) error {
		recs = append(recs, rec)
		return nil
	})
	d.Records = recs
	return d, err
}

// scanDiverted is ParseDiverted handing each record to fn as it is read,
// so a caller can stream a file of any size: d gets the counts and the
// issues, never the records. An error from fn stops the scan.
func scanDiverted(r io.Reader, maxLine int, fn func(Record) error) (Diverted, error) {
	var d Diverted
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	sc.Split(scanUniversalLines)
	line := 0
	for sc.Scan() {
		line++
		text, repaired := pyjson.DecodeUTF8Replace(sc.Bytes())
		if pyjson.Strip(text) == "" {
			d.Blank++
			continue
		}
		d.Lines++
		if repaired {
			d.Repaired = append(d.Repaired, line)
		}
		obj, err := pyjson.Parse(text)
		if err != nil {
			d.Issues = append(d.Issues, LineIssue{Line: line, Reason: "invalid JSON: " + err.Error(), Invalid: true})
			continue
		}
		if obj.Kind != pyjson.KindDict {
			d.Issues = append(d.Issues, LineIssue{Line: line, Reason: "not a JSON object", Invalid: true})
			continue
		}
		fields, issue := buildRecord(obj)
		if issue != nil {
			issue.Line = line
			d.Issues = append(d.Issues, *issue)
			continue
		}
		ident := IdentityJSON(fields)
		if pyjson.HasSurrogate(string(ident)) {
			// Python cannot encode this identity to UTF-8, so Hermes
			// cannot replay the file at all. Skipping the line without
			// feeding the chain gives the ids Hermes computes once the
			// line is removed.
			d.Issues = append(d.Issues, LineIssue{Line: line, Invalid: true,
				Reason: "lone UTF-16 surrogate escape in role, content or tool fields (Hermes cannot hash it; remove the line)"})
			continue
		}
		if err := fn(Record{Line: line, Fields: fields, Repaired: repaired, identity: ident}); err != nil {
			return d, err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return d, fmt.Errorf("line %d is longer than %d MiB: %w", line+1, maxLine>>20, err)
		}
		return d, err
	}
	return d, nil
}

// scanUniversalLines splits on \n, \r\n and \r, as Python's text mode
// does when it reads a file with newline=None.
func scanUniversalLines(data []byte, atEOF bool) (int, []byte, error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\n' {
			return i + 1, data[:i], nil
		}
		if i+1 < len(data) {
			if data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		}
		if atEOF {
			return i + 1, data[:i], nil
		}
		return 0, nil, nil // a \r at the end of the buffer: wait for a \n
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// hasToolGraph: a non-empty tool_calls list, or a truthy tool_call_id or
// tool_name.
func hasToolGraph(obj pyjson.Value) bool {
	if calls, ok := obj.Get("tool_calls"); ok && calls.Kind == pyjson.KindList && len(calls.List) > 0 {
		return true
	}
	id, _ := obj.Get("tool_call_id")
	name, _ := obj.Get("tool_name")
	return id.Truthy() || name.Truthy()
}

// buildRecord applies Hermes' record rules to one JSON object: role must be
// a str that is not blank; non-str content becomes json.dumps(content,
// ensure_ascii=False) (original key order); a record with null or blank
// content and no tool graph is dropped.
func buildRecord(obj pyjson.Value) (pyjson.Value, *LineIssue) {
	role, _ := obj.Get("role")
	if role.Kind != pyjson.KindStr || pyjson.Strip(role.Str) == "" {
		return pyjson.Value{}, &LineIssue{Reason: "no role (a non-empty string is required)", Invalid: true}
	}
	content, _ := obj.Get("content")
	if content.Kind != pyjson.KindNull && content.Kind != pyjson.KindStr {
		content = pyjson.String(content.Dumps(pyjson.DumpOptions{}))
	}
	tools := hasToolGraph(obj)
	switch {
	case content.Kind == pyjson.KindNull && !tools:
		return pyjson.Value{}, &LineIssue{Reason: "null content and no tool calls (dropped, as Hermes drops it)"}
	case content.Kind == pyjson.KindStr && pyjson.Strip(content.Str) == "" && !tools:
		return pyjson.Value{}, &LineIssue{Reason: "blank content and no tool calls (dropped, as Hermes drops it)"}
	}
	rec := pyjson.Value{Kind: pyjson.KindDict}
	rec.Set("role", role)
	rec.Set("content", content)
	if calls, ok := obj.Get("tool_calls"); ok && calls.Kind == pyjson.KindList {
		rec.Set("tool_calls", calls)
	}
	for _, k := range []string{"tool_name", "tool_call_id"} {
		if v, _ := obj.Get(k); v.Truthy() {
			rec.Set(k, v)
		}
	}
	if ts, ok := obj.Get("timestamp"); ok && ts.Kind != pyjson.KindNull {
		rec.Set("timestamp", ts)
	}
	for _, k := range divertedDurableFields {
		if v, ok := obj.Get(k); ok {
			rec.Set(k, v)
		}
	}
	return rec, nil
}

// finiteTimestamp is Hermes' _diverted_timestamp: float(value) when it is
// finite, else none.
func finiteTimestamp(v pyjson.Value, ok bool) (float64, bool) {
	if !ok || v.Kind == pyjson.KindNull {
		return 0, false
	}
	f, ok := pyjson.Float(v)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}
