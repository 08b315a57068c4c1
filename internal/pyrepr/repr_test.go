package pyrepr

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"unicode"
)

type taggedValue struct {
	S    *string `json:"s"`
	F    *string `json:"f"`
	I    *string `json:"i"`
	None bool    `json:"none"`
}

// repr of the tagged value, with the decoded value for the test's
// messages.
func (v taggedValue) repr(t *testing.T) (string, string) {
	t.Helper()
	switch {
	case v.S != nil:
		b, err := hex.DecodeString(*v.S)
		if err != nil {
			t.Fatal(err)
		}
		return Str(string(b)), string(b)
	case v.F != nil:
		f, err := strconv.ParseFloat(*v.F, 64)
		if err != nil {
			t.Fatalf("float %s: %v", *v.F, err)
		}
		return Float(f), *v.F
	case v.I != nil:
		n, err := strconv.ParseInt(*v.I, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return Int(n), *v.I
	case v.None:
		return None, "None"
	}
	t.Fatal("empty tagged value")
	return "", ""
}

// TestVectors checks every value and tuple of vectors.json (computed with
// Python 3.11; see testdata/vectors/README.md): repr() byte for byte, and
// the SHA-256 Hermes would store.
func TestVectors(t *testing.T) {
	var file struct {
		Python, Unicode string
		Vectors         []struct {
			Value   *taggedValue  `json:"value"`
			Tuple   []taggedValue `json:"tuple"`
			ReprHex string        `json:"repr_hex"`
			SHA256  string        `json:"sha256"`
		}
	}
	b, err := os.ReadFile(filepath.Join("testdata", "vectors", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if file.Unicode != UnicodeVersion {
		t.Fatalf("vectors are from Unicode %s, the tables from %s", file.Unicode, UnicodeVersion)
	}
	if len(file.Vectors) < 90 {
		t.Fatalf("only %d vectors", len(file.Vectors))
	}
	for i, v := range file.Vectors {
		want, err := hex.DecodeString(v.ReprHex)
		if err != nil {
			t.Fatal(err)
		}
		var got, what string
		if v.Value != nil {
			got, what = v.Value.repr(t)
		} else {
			items := make([]string, len(v.Tuple))
			for j, x := range v.Tuple {
				items[j], _ = x.repr(t)
			}
			got, what = Tuple(items...), "tuple "+Tuple(items...)
		}
		if got != string(want) {
			t.Errorf("vector %d (%q): got %s, want %s", i, what, got, want)
			continue
		}
		sum := sha256.Sum256([]byte(got))
		if hex.EncodeToString(sum[:]) != v.SHA256 {
			t.Errorf("vector %d: sha256 %x, want %s", i, sum, v.SHA256)
		}
	}
}

// TestSpecExamples are the two keys hermes-compat.md gives with the
// digests read from a real Hermes store.
func TestSpecExamples(t *testing.T) {
	for _, c := range []struct {
		repr, sum string
	}{
		{Tuple(Str("user"), Str("hello"), Float(1700000000.5), None, None, None),
			"cce4457d21ff65bbdee8107e316e66d38ca27b97d58d6fa3dab3af709ebebe2d"},
		{Tuple(Str("tool"), Str("/src/auth.py"), Float(1700000001.25), Str("call_1"), None, Str("search_files")),
			"110cb72a45fd6618386ff9cd34070726d7be52f7c104d84224f967fa524b4eb4"},
	} {
		sum := sha256.Sum256([]byte(c.repr))
		if hex.EncodeToString(sum[:]) != c.sum {
			t.Errorf("%s: %x, want %s", c.repr, sum, c.sum)
		}
	}
}

// TestTablesAgreeWithGo: every code point the tables call assigned in
// Unicode 14 is assigned in Go's (newer) tables too, and the categories
// that decide printability agree, so the generated tables and Go's can
// only differ by what Unicode added later.
func TestTablesAgreeWithGo(t *testing.T) {
	if unicode.Version < UnicodeVersion {
		t.Skipf("Go's Unicode %s is older than the tables' %s", unicode.Version, UnicodeVersion)
	}
	goNonPrintable := func(r rune) bool {
		return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Cs, unicode.Co, unicode.Zl, unicode.Zp) ||
			(unicode.Is(unicode.Zs, r) && r != ' ')
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		assigned14 := !in(r, unassigned)
		goAssigned := unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C)
		if assigned14 && !goAssigned {
			t.Fatalf("U+%04X assigned in Unicode %s but not in Go's %s", r, UnicodeVersion, unicode.Version)
		}
		if assigned14 && goNonPrintable(r) != !IsPrintable(r) {
			t.Fatalf("U+%04X: printable %v here, Go's categories say non-printable %v", r, IsPrintable(r), goNonPrintable(r))
		}
	}
}

func TestUnstable(t *testing.T) {
	for s, want := range map[string]bool{
		"hello": false, "漢字 🙂": false, "\u0378": true, "\U0001faf8": true,
		"\ufdd0": false, "\U0010ffff": false, "\ue000": false, "\xed\xa0\x80": false,
	} {
		if got := Unstable(s); got != want {
			t.Errorf("Unstable(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestFloatEdges(t *testing.T) {
	for f, want := range map[float64]string{
		math.Copysign(0, -1): "-0.0", 1e16: "1e+16", 1.5e-5: "1.5e-05", 1e-4: "0.0001",
		math.MaxFloat64: "1.7976931348623157e+308", 5e-324: "5e-324", 123.0: "123.0",
	} {
		if got := Float(f); got != want {
			t.Errorf("Float(%v) = %s, want %s", f, got, want)
		}
	}
}
