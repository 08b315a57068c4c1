package pyjson

import (
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
	"unicode/utf8"
)

// A fuzz target for the Python-compatible JSON model. Seeds: the
// CPython-computed golden file testdata/dumps plus testdata/fuzz/FuzzDumps/.
// The properties are checked against independent readings: encoding/json
// as a second decoder, and the escaping rules of CPython's encoder spelled
// out as a checker instead of a second encoder.

func FuzzDumps(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "dumps", "cases.json"))
	if err != nil {
		f.Fatal(err)
	}
	cases, err := Parse(string(b))
	if err != nil || cases.Kind != KindList || len(cases.List) == 0 {
		f.Fatalf("dumps cases: %v", err)
	}
	for _, c := range cases.List {
		in, _ := c.Get("input")
		f.Add(in.Str)
	}
	f.Fuzz(func(t *testing.T, in string) {
		text, _ := DecodeUTF8Replace([]byte(in))
		v, err := Parse(text)
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

func checkDumps(t *testing.T, text string, valid bool, v Value, o DumpOptions) {
	out := v.Dumps(o)
	if err := checkPyJSONText(out, o.EnsureASCII); err != nil {
		t.Fatalf("%+v: %v in %q", o, err, out)
	}
	finite := allFinite(v)
	if finite && !json.Valid([]byte(out)) {
		t.Fatalf("%+v: output is not JSON: %q", o, out)
	}
	w, err := Parse(out)
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

func surrogateKey(v Value) bool {
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

func allFinite(v Value) bool {
	switch v.Kind {
	case KindFloat:
		return !math.IsNaN(v.Float) && !math.IsInf(v.Float, 0)
	case KindList:
		for _, e := range v.List {
			if !allFinite(e) {
				return false
			}
		}
	case KindDict:
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
func sameValue(a, b Value, sorted bool) error {
	if a.Kind != b.Kind {
		return fmt.Errorf("kind %d became %d", a.Kind, b.Kind)
	}
	switch a.Kind {
	case KindBool:
		if a.Bool != b.Bool {
			return fmt.Errorf("bool changed")
		}
	case KindInt:
		if a.Int != b.Int {
			return fmt.Errorf("int %s became %s", a.Int, b.Int)
		}
	case KindFloat:
		if math.Float64bits(a.Float) != math.Float64bits(b.Float) && !(math.IsNaN(a.Float) && math.IsNaN(b.Float)) {
			return fmt.Errorf("float %v became %v", a.Float, b.Float)
		}
		if r := FloatJSON(a.Float); !math.IsNaN(a.Float) && !math.IsInf(a.Float, 0) {
			mant, _, _ := strings.Cut(strconv.FormatFloat(math.Abs(a.Float), 'e', -1, 64), "e")
			digits := strings.Trim(strings.NewReplacer(".", "", "-", "").Replace(strings.Split(r, "e")[0]), "0")
			if !floatRepr.MatchString(r) || (a.Float != 0 && digits != strings.Trim(strings.Replace(mant, ".", "", 1), "0")) {
				return fmt.Errorf("float %v written %s, not as Python's repr", a.Float, r)
			}
		}
	case KindStr:
		if a.Str != b.Str {
			return fmt.Errorf("str %q became %q", a.Str, b.Str)
		}
	case KindList:
		if len(a.List) != len(b.List) {
			return fmt.Errorf("list of %d became %d", len(a.List), len(b.List))
		}
		for i := range a.List {
			if err := sameValue(a.List[i], b.List[i], sorted); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
	case KindDict:
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

func keysSorted(v Value) error {
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
