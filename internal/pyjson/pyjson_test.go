package pyjson

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The cases under testdata were computed by CPython's json module
// (testdata/gen.py). They are read with Parse itself where
// they hold lone surrogates, which encoding/json would replace.

func loadPyCases(t *testing.T, name string) Value {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name, "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := Parse(string(b))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if v.Kind != KindList || len(v.List) == 0 {
		t.Fatalf("%s: no cases", name)
	}
	return v
}

func TestPyFloatReprMatchesPython(t *testing.T) {
	for _, c := range loadPyCases(t, "floats").List {
		bits, err := hex.DecodeString(c.List[0].Str)
		if err != nil {
			t.Fatal(err)
		}
		f := math.Float64frombits(binary.BigEndian.Uint64(bits))
		if got, want := FloatJSON(f), c.List[1].Str; got != want {
			t.Errorf("%x: got %s, Python %s", bits, got, want)
		}
	}
}

func TestDecodeUTF8ReplaceMatchesPython(t *testing.T) {
	for _, c := range loadPyCases(t, "utf8").List {
		b, err := hex.DecodeString(c.List[0].Str)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Parse(c.List[1].Str)
		if err != nil {
			t.Fatal(err)
		}
		got, replaced := DecodeUTF8Replace(b)
		if got != want.Str {
			t.Errorf("%x: got %+q, Python %+q", b, got, want.Str)
		}
		if replaced != strings.ContainsRune(want.Str, '\ufffd') && !strings.Contains(string(b), "\ufffd") {
			t.Errorf("%x: replaced=%v", b, replaced)
		}
	}
}

func TestDumpsMatchesPython(t *testing.T) {
	n := 0
	for _, c := range loadPyCases(t, "dumps").List {
		in, _ := c.Get("input")
		v, err := Parse(in.Str)
		if e, rejected := c.Get("error"); rejected {
			if err == nil {
				t.Errorf("%+q: Python raises %s, we accepted %s", in.Str, e.Str, v.Dumps(DumpOptions{}))
			}
			continue
		}
		if err != nil {
			t.Errorf("%+q: Python accepts, we: %v", in.Str, err)
			continue
		}
		n++
		for key, o := range map[string]DumpOptions{
			"sorted":       {SortKeys: true},
			"ascii":        {EnsureASCII: true},
			"sorted_ascii": {SortKeys: true, EnsureASCII: true},
		} {
			want, _ := c.Get(key)
			if got := v.Dumps(o); got != want.Str {
				t.Errorf("%+q %s:\n got %+q\nwant %+q", in.Str, key, got, want.Str)
			}
		}
	}
	if n < 100 {
		t.Fatalf("only %d accepted cases", n)
	}
}

func TestPyFloatStringMatchesPython(t *testing.T) {
	for _, c := range loadPyCases(t, "floatstr").List {
		s, want, isNaN := c.List[0].Str, c.List[1], c.List[2].Bool
		f, ok := Float(String(s))
		switch {
		case want.Kind == KindStr && want.Str == "error":
			if ok {
				t.Errorf("float(%+q): Python raises, we got %v", s, f)
			}
		case isNaN:
			if !ok || !math.IsNaN(f) {
				t.Errorf("float(%+q): want nan, got %v %v", s, f, ok)
			}
		default:
			got := strings.NewReplacer("Infinity", "inf").Replace(FloatJSON(f))
			if !ok || got != want.Str {
				t.Errorf("float(%+q) = %s (ok %v), Python %s", s, got, ok, want.Str)
			}
		}
	}
}

func TestPyValueOrderAndEquality(t *testing.T) {
	v, err := Parse(`{"z": 1, "a": [1.0, true], "m": {"y": 2, "x": 3}, "z": 4}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Dumps(DumpOptions{}); got != `{"z": 4, "a": [1.0, true], "m": {"y": 2, "x": 3}}` {
		t.Fatalf("order: %s", got)
	}
	w, _ := Parse(`{"a": [1, 1], "m": {"x": 3, "y": 2.0}, "z": 4.0}`)
	if !Equal(v, w) {
		t.Fatal("Python compares 1 == 1.0 == True and dicts regardless of order")
	}
	x, _ := Parse(`{"a": [1, 1], "m": {"x": 3, "y": "2"}, "z": 4}`)
	if Equal(v, x) {
		t.Fatal(`2 == "2" is False in Python`)
	}
	big, _ := Parse(`[123456789012345678901234567890, 123456789012345678901234567891]`)
	if Equal(big.List[0], big.List[1]) {
		t.Fatal("big ints must compare exactly")
	}
	v.Set("a", String("new"))
	v.Set("b", Int64(7))
	if got := v.Dumps(DumpOptions{}); got != `{"z": 4, "a": "new", "m": {"y": 2, "x": 3}, "b": 7}` {
		t.Fatalf("Set: %s", got)
	}
}

func TestScrubSurrogates(t *testing.T) {
	v, err := Parse(`"a\ud800b\udc00\udc00c\ud83d\ude00"`)
	if err != nil {
		t.Fatal(err)
	}
	if !HasSurrogate(v.Str) {
		t.Fatal("lone surrogates must be kept")
	}
	if got := ScrubSurrogates(v.Str); got != "a\ufffdb\ufffd\ufffdc\U0001f600" {
		t.Fatalf("scrub: %+q", got)
	}
	if got := v.Dumps(DumpOptions{EnsureASCII: true}); got != `"a\ud800b\udc00\udc00c\ud83d\ude00"` {
		t.Fatalf("ascii dump: %s", got)
	}
}
