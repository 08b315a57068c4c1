package recovery

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// Fuzz targets for the diverted-JSONL parser and the Python-compatible
// JSON model. Seeds: the CPython-computed golden files (testdata/jsonl,
// testdata/pyjson/dumps) plus testdata/fuzz/<FuzzName>/. The properties
// are checked against independent readings where one exists: line
// splitting and Python's isspace re-derived here, encoding/json as a second
// decoder, and the escaping rules of CPython's encoder spelled out as a
// checker instead of a second encoder.

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
		text, _ := DecodeUTF8Replace(l.raw)
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
	if role.Kind != PyKindStr || pythonBlank(role.Str) {
		t.Fatalf("line %d accepted with role %+v", r.Line, role)
	}
	content, ok := r.Get("content")
	if !ok || (content.Kind != PyKindStr && content.Kind != PyKindNull) {
		t.Fatalf("line %d: content %+v is not a str or null", r.Line, content)
	}
	if r.Repaired != !utf8.Valid(raw) {
		t.Fatalf("line %d: Repaired=%v", r.Line, r.Repaired)
	}
	if ident := IdentityJSON(r.Fields); !utf8.Valid(ident) {
		t.Fatalf("line %d: identity %q is not UTF-8 (Hermes could not hash it)", r.Line, ident)
	}
	want := r.Fields.Dumps(DumpOptions{EnsureASCII: true})

	// The same line alone is the same record: nothing depends on its
	// neighbours.
	alone, _ := ParseDiverted(bytes.NewReader(raw))
	if len(alone.Records) != 1 || alone.Records[0].Fields.Dumps(DumpOptions{EnsureASCII: true}) != want {
		t.Fatalf("line %d alone: %+v\nin the file: %s", r.Line, alone, want)
	}
	// A record written back as a line is accepted again, identically:
	// Hermes' record rules are a fixed point.
	again, _ := ParseDiverted(strings.NewReader(want))
	if len(again.Records) != 1 {
		t.Fatalf("line %d: the record %s does not parse back: %v", r.Line, want, again.Issues)
	}
	if got := again.Records[0].Fields.Dumps(DumpOptions{EnsureASCII: true}); got != want {
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
			t.Fatalf("line %d: display_metadata %s lacks the id", r.Line, meta.Dumps(DumpOptions{}))
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

func FuzzPyJSONDumps(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "pyjson", "dumps", "cases.json"))
	if err != nil {
		f.Fatal(err)
	}
	cases, err := ParsePyJSON(string(b))
	if err != nil || cases.Kind != PyKindList || len(cases.List) == 0 {
		f.Fatalf("dumps cases: %v", err)
	}
	for _, c := range cases.List {
		in, _ := c.Get("input")
		f.Add(in.Str)
	}
	f.Fuzz(func(t *testing.T, in string) {
		text, _ := DecodeUTF8Replace([]byte(in))
		v, err := ParsePyJSON(text)
		valid := json.Valid([]byte(text))
		switch {
		case valid && err != nil:
			if !strings.Contains(err.Error(), "4300-digit") && !strings.Contains(err.Error(), "nesting") {
				t.Fatalf("valid JSON rejected: %v", err)
			}
			return
		case err != nil:
			return
		case !valid && !hasNonFiniteLiteral(text):
			t.Fatalf("accepted invalid JSON without NaN/Infinity: %q", text)
		}
		for _, o := range []DumpOptions{{}, {SortKeys: true}, {EnsureASCII: true}, {SortKeys: true, EnsureASCII: true}} {
			checkDumps(t, text, valid, v, o)
		}
	})
}

func checkDumps(t *testing.T, text string, valid bool, v PyValue, o DumpOptions) {
	out := v.Dumps(o)
	if err := checkPyJSONText(out, o.EnsureASCII); err != nil {
		t.Fatalf("%+v: %v in %q", o, err, out)
	}
	finite := allFinite(v)
	if finite && !json.Valid([]byte(out)) {
		t.Fatalf("%+v: output is not JSON: %q", o, out)
	}
	w, err := ParsePyJSON(out)
	if err != nil {
		t.Fatalf("%+v: output does not parse back: %v: %q", o, err, out)
	}
	if err := sameValue(v, w, o.SortKeys); err != nil {
		t.Fatalf("%+v: round trip: %v\n in %q\nout %q", o, err, text, out)
	}
	if w.Dumps(o) != out {
		t.Fatalf("%+v: dumps is not a fixed point: %q", o, out)
	}
	if o.SortKeys {
		if err := keysSorted(w); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
	}
	// A second, independent decoder agrees on the value, with ints kept
	// as ints and floats as floats. It reads every lone surrogate as
	// U+FFFD, so distinct surrogate keys would collide there.
	if valid && finite && utf8.ValidString(text) && !surrogateKey(v) {
		var a, b any
		decodeNumbers(t, text, &a)
		decodeNumbers(t, ScrubSurrogates(out), &b)
		if err := sameJSON(a, b); err != nil {
			t.Fatalf("%+v: encoding/json sees %v\n in %q\nout %q", o, err, text, out)
		}
	}
}

func surrogateKey(v PyValue) bool {
	for _, m := range v.Dict {
		if HasSurrogate(m.Key) || surrogateKey(m.Value) {
			return true
		}
	}
	for _, e := range v.List {
		if surrogateKey(e) {
			return true
		}
	}
	return false
}

func decodeNumbers(t *testing.T, s string, v *any) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		t.Fatalf("encoding/json: %v: %q", err, s)
	}
}

// hasNonFiniteLiteral reports whether NaN or Infinity appears outside a
// string, the only extension Python's decoder makes to JSON.
func hasNonFiniteLiteral(s string) bool {
	in := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == 'N' || c == 'I'):
			return true
		}
	}
	return false
}

func allFinite(v PyValue) bool {
	switch v.Kind {
	case PyKindFloat:
		return !math.IsNaN(v.Float) && !math.IsInf(v.Float, 0)
	case PyKindList:
		for _, e := range v.List {
			if !allFinite(e) {
				return false
			}
		}
	case PyKindDict:
		for _, m := range v.Dict {
			if !allFinite(m.Value) {
				return false
			}
		}
	}
	return true
}

// checkPyJSONText checks what CPython's encoder writes: separators ", "
// and ": " and no other whitespace outside strings; in strings the short
// escapes \" \\ \n \r \t \b \f, \u with four lowercase hex digits only for
// the other control characters (and, with ensure_ascii, DEL and everything
// non-ASCII), never "\/"; nothing raw below 0x20, and nothing raw above
// 0x7e with ensure_ascii. Everything else, U+2028 included, stays raw.
func checkPyJSONText(s string, ascii bool) error {
	in := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !in {
			switch {
			case c == '"':
				in = true
			case c == ',' || c == ':':
				if i+2 >= len(s) || s[i+1] != ' ' || s[i+2] == ' ' {
					return fmt.Errorf("separator %q at %d not followed by exactly one space", c, i)
				}
				i++
			case c == ' ' || c == '\t' || c == '\n' || c == '\r':
				return fmt.Errorf("whitespace outside a string at %d", i)
			}
			continue
		}
		switch {
		case c == '"':
			in = false
		case c < 0x20:
			return fmt.Errorf("raw control character %#x at %d", c, i)
		case ascii && c >= 0x7f:
			return fmt.Errorf("raw byte %#x at %d with ensure_ascii", c, i)
		case c == '\\':
			if i+1 >= len(s) {
				return fmt.Errorf("dangling backslash")
			}
			i++
			switch s[i] {
			case '"', '\\', 'n', 'r', 't', 'b', 'f':
			case 'u':
				if i+4 >= len(s) || !hex4Lower.MatchString(s[i+1:i+5]) {
					return fmt.Errorf("bad \\u escape at %d", i)
				}
				cp, _ := strconv.ParseUint(s[i+1:i+5], 16, 32)
				short := cp == '\n' || cp == '\r' || cp == '\t' || cp == '\b' || cp == '\f'
				if !(cp < 0x20 && !short) && !(ascii && cp >= 0x7f) {
					return fmt.Errorf("\\u%s escapes a character Python writes otherwise", s[i+1:i+5])
				}
				i += 4
			default:
				return fmt.Errorf("escape \\%c Python never writes", s[i])
			}
		}
	}
	if in {
		return fmt.Errorf("unterminated string")
	}
	return nil
}

var (
	floatRepr = regexp.MustCompile(`^-?(\d+\.\d+|\d(\.\d+)?e[+-]\d\d\d?)$`)
	hex4Lower = regexp.MustCompile(`^[0-9a-f]{4}$`)
)

// sameValue: the same Python value, kinds included (an int stays an int,
// a float keeps its bits, NaN equals NaN), with dict order kept unless the
// keys were sorted. Floats are also checked to be written as Python's
// repr: shortest round-trip digits.
func sameValue(a, b PyValue, sorted bool) error {
	if a.Kind != b.Kind {
		return fmt.Errorf("kind %d became %d", a.Kind, b.Kind)
	}
	switch a.Kind {
	case PyKindBool:
		if a.Bool != b.Bool {
			return fmt.Errorf("bool changed")
		}
	case PyKindInt:
		if a.Int != b.Int {
			return fmt.Errorf("int %s became %s", a.Int, b.Int)
		}
	case PyKindFloat:
		if math.Float64bits(a.Float) != math.Float64bits(b.Float) && !(math.IsNaN(a.Float) && math.IsNaN(b.Float)) {
			return fmt.Errorf("float %v became %v", a.Float, b.Float)
		}
		if r := PyFloatJSON(a.Float); !math.IsNaN(a.Float) && !math.IsInf(a.Float, 0) {
			mant, _, _ := strings.Cut(strconv.FormatFloat(math.Abs(a.Float), 'e', -1, 64), "e")
			digits := strings.Trim(strings.NewReplacer(".", "", "-", "").Replace(strings.Split(r, "e")[0]), "0")
			if !floatRepr.MatchString(r) || (a.Float != 0 && digits != strings.Trim(strings.Replace(mant, ".", "", 1), "0")) {
				return fmt.Errorf("float %v written %s, not as Python's repr", a.Float, r)
			}
		}
	case PyKindStr:
		if a.Str != b.Str {
			return fmt.Errorf("str %q became %q", a.Str, b.Str)
		}
	case PyKindList:
		if len(a.List) != len(b.List) {
			return fmt.Errorf("list of %d became %d", len(a.List), len(b.List))
		}
		for i := range a.List {
			if err := sameValue(a.List[i], b.List[i], sorted); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
	case PyKindDict:
		if len(a.Dict) != len(b.Dict) {
			return fmt.Errorf("dict of %d keys became %d", len(a.Dict), len(b.Dict))
		}
		for i, m := range a.Dict {
			o, ok := b.Get(m.Key)
			if !ok || (!sorted && b.Dict[i].Key != m.Key) {
				return fmt.Errorf("key %q lost or moved", m.Key)
			}
			if err := sameValue(m.Value, o, sorted); err != nil {
				return fmt.Errorf("[%q]: %w", m.Key, err)
			}
		}
	}
	return nil
}

func keysSorted(v PyValue) error {
	for i, m := range v.Dict {
		if i > 0 && v.Dict[i-1].Key >= m.Key {
			return fmt.Errorf("key %q after %q", m.Key, v.Dict[i-1].Key)
		}
		if err := keysSorted(m.Value); err != nil {
			return err
		}
	}
	for _, e := range v.List {
		if err := keysSorted(e); err != nil {
			return err
		}
	}
	return nil
}

// sameJSON compares two encoding/json values decoded with UseNumber. An
// integer literal must come back as an integer literal of the same value
// (Python ints are exact); any other number as a float literal that reads
// back to the same float64.
func sameJSON(a, b any) error {
	switch av := a.(type) {
	case json.Number:
		bv, ok := b.(json.Number)
		if !ok {
			return fmt.Errorf("number %s became %v", av, b)
		}
		isInt := func(n json.Number) bool { return !strings.ContainsAny(string(n), ".eE") }
		if isInt(av) {
			x, _ := new(big.Int).SetString(string(av), 10)
			y, ok := new(big.Int).SetString(string(bv), 10)
			if !isInt(bv) || !ok || x.Cmp(y) != 0 {
				return fmt.Errorf("int %s became %s", av, bv)
			}
			return nil
		}
		x, _ := strconv.ParseFloat(string(av), 64)
		y, _ := strconv.ParseFloat(string(bv), 64)
		if isInt(bv) || x != y || math.Signbit(x) != math.Signbit(y) {
			return fmt.Errorf("float %s became %s", av, bv)
		}
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok || len(av) != len(bv) {
			return fmt.Errorf("object became %v", b)
		}
		for k, x := range av {
			y, ok := bv[k]
			if !ok {
				return fmt.Errorf("key %q lost", k)
			}
			if err := sameJSON(x, y); err != nil {
				return fmt.Errorf("[%q]: %w", k, err)
			}
		}
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return fmt.Errorf("array became %v", b)
		}
		for i := range av {
			if err := sameJSON(av[i], bv[i]); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
	default:
		if a != b {
			return fmt.Errorf("%#v became %#v", a, b)
		}
	}
	return nil
}
