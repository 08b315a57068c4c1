package recovery

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stateguard/stateguard/internal/pyjson"
)

// A fuzz target for the diverted-JSONL parser (the JSON model itself is
// fuzzed in internal/pyjson). Seeds: the CPython-computed golden files
// testdata/jsonl plus testdata/fuzz/FuzzParseDiverted/. The properties are
// checked against independent readings where one exists: line splitting
// and Python's isspace re-derived here.

func FuzzParseDiverted(f *testing.F) {
	ins, _ := filepath.Glob(filepath.Join("testdata", "jsonl", "*", "input.jsonl"))
	if len(ins) == 0 {
		f.Fatal("no golden jsonl inputs")
	}
	for _, p := range ins {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		for _, l := range universalLines(b) {
			f.Add(l.raw)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDiverted(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		checkDiverted(t, b, d)
	})
}

// divertedLine is one line as Python's universal newlines split it.
type divertedLine struct {
	raw []byte // without its terminator
	end int    // offset just past its terminator
}

func universalLines(b []byte) []divertedLine {
	var out []divertedLine
	for i := 0; i < len(b); {
		j := bytes.IndexAny(b[i:], "\r\n")
		if j < 0 {
			out = append(out, divertedLine{raw: b[i:], end: len(b)})
			break
		}
		j += i
		end := j + 1
		if b[j] == '\r' && end < len(b) && b[end] == '\n' {
			end++
		}
		out = append(out, divertedLine{raw: b[i:j], end: end})
		i = end
	}
	return out
}

// pythonBlank is str.strip() == "" re-derived: Go's White_Space plus the
// four separators 0x1c-0x1f that Python's isspace also accepts.
func pythonBlank(s string) bool {
	return strings.TrimFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
	}) == ""
}

func checkDiverted(t *testing.T, b []byte, d Diverted) {
	lines := universalLines(b)
	nonBlank := map[int]bool{}
	var repaired []int
	for i, l := range lines {
		text, _ := pyjson.DecodeUTF8Replace(l.raw)
		if !pythonBlank(text) {
			nonBlank[i+1] = true
			if !utf8.Valid(l.raw) {
				repaired = append(repaired, i+1)
			}
		}
	}
	if d.Lines != len(nonBlank) || d.Blank != len(lines)-len(nonBlank) {
		t.Fatalf("lines %d blank %d, want %d and %d", d.Lines, d.Blank, len(nonBlank), len(lines)-len(nonBlank))
	}
	if fmt.Sprint(d.Repaired) != fmt.Sprint(repaired) {
		t.Fatalf("repaired lines %v, want %v", d.Repaired, repaired)
	}

	// Every non-blank line is accounted for exactly once, in file order:
	// as a record or as an issue with a reason.
	seen := map[int]bool{}
	for _, r := range d.Records {
		seen[r.Line] = true
	}
	last := 0
	for _, is := range d.Issues {
		if is.Reason == "" {
			t.Fatalf("line %d skipped without a reason", is.Line)
		}
		if is.Line <= last || seen[is.Line] {
			t.Fatalf("issue line %d out of order or also a record", is.Line)
		}
		last = is.Line
		seen[is.Line] = true
	}
	if len(seen) != len(nonBlank) {
		t.Fatalf("%d lines accounted for, %d non-blank", len(seen), len(nonBlank))
	}
	for l := range seen {
		if !nonBlank[l] {
			t.Fatalf("line %d is blank or out of range but was reported", l)
		}
	}
	for i, is := range d.Issues {
		again, _ := ParseDiverted(bytes.NewReader(lines[is.Line-1].raw))
		if len(again.Records) != 0 || len(again.Issues) != 1 || again.Issues[0].Reason != is.Reason || again.Issues[0].Invalid != is.Invalid {
			t.Fatalf("issue %d (line %d) alone: %+v, in the file: %+v", i, is.Line, again, is)
		}
	}

	last = 0
	for _, r := range d.Records {
		if r.Line <= last {
			t.Fatalf("record line %d after %d", r.Line, last)
		}
		last = r.Line
		checkRecord(t, r, lines[r.Line-1].raw)
	}
	checkChain(t, b, lines, d.Records)
}

func checkRecord(t *testing.T, r Record, raw []byte) {
	role, _ := r.Get("role")
	if role.Kind != pyjson.KindStr || pythonBlank(role.Str) {
		t.Fatalf("line %d accepted with role %+v", r.Line, role)
	}
	content, ok := r.Get("content")
	if !ok || (content.Kind != pyjson.KindStr && content.Kind != pyjson.KindNull) {
		t.Fatalf("line %d: content %+v is not a str or null", r.Line, content)
	}
	if r.Repaired != !utf8.Valid(raw) {
		t.Fatalf("line %d: Repaired=%v", r.Line, r.Repaired)
	}
	if ident := IdentityJSON(r.Fields); !utf8.Valid(ident) {
		t.Fatalf("line %d: identity %q is not UTF-8 (Hermes could not hash it)", r.Line, ident)
	}
	want := r.Fields.Dumps(pyjson.DumpOptions{EnsureASCII: true})

	// The same line alone is the same record: nothing depends on its
	// neighbours.
	alone, _ := ParseDiverted(bytes.NewReader(raw))
	if len(alone.Records) != 1 || alone.Records[0].Fields.Dumps(pyjson.DumpOptions{EnsureASCII: true}) != want {
		t.Fatalf("line %d alone: %+v\nin the file: %s", r.Line, alone, want)
	}
	// A record written back as a line is accepted again, identically:
	// Hermes' record rules are a fixed point.
	again, _ := ParseDiverted(strings.NewReader(want))
	if len(again.Records) != 1 {
		t.Fatalf("line %d: the record %s does not parse back: %v", r.Line, want, again.Issues)
	}
	if got := again.Records[0].Fields.Dumps(pyjson.DumpOptions{EnsureASCII: true}); got != want {
		t.Fatalf("line %d re-read:\n got %s\nwant %s", r.Line, got, want)
	}
}

// checkChain: ids are 64 hex digits, distinct, deterministic, land in
// display_metadata, and a file cut after a record keeps its earlier ids.
func checkChain(t *testing.T, b []byte, lines []divertedLine, recs []Record) {
	if len(recs) == 0 {
		return
	}
	AssignRecoveryIDs("/fuzz/s.jsonl", recs)
	ids := map[string]bool{}
	for _, r := range recs {
		if len(r.RecoveryID) != 64 || ids[r.RecoveryID] {
			t.Fatalf("line %d: id %q bad or repeated", r.Line, r.RecoveryID)
		}
		ids[r.RecoveryID] = true
		meta, _ := r.Get("display_metadata")
		if got, _ := meta.Get(RecoveryIDKey); got.Str != r.RecoveryID {
			t.Fatalf("line %d: display_metadata %s lacks the id", r.Line, meta.Dumps(pyjson.DumpOptions{}))
		}
	}
	k := len(recs) / 2
	prefix, err := ParseDiverted(bytes.NewReader(b[:lines[recs[k].Line-1].end]))
	if err != nil || len(prefix.Records) != k+1 {
		t.Fatalf("prefix through line %d: %d records, %v", recs[k].Line, len(prefix.Records), err)
	}
	AssignRecoveryIDs("/fuzz/s.jsonl", prefix.Records)
	for i, r := range prefix.Records {
		if r.RecoveryID != recs[i].RecoveryID {
			t.Fatalf("record %d: id changed when the file was cut after line %d", i, recs[k].Line)
		}
	}
}
