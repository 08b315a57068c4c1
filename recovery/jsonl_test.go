package recovery

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/pyjson"
)

// TestDivertedGolden checks the parser, the record rules and the id chain
// against testdata/jsonl/<case>/expected.json, which gen.py computes by
// reading input.jsonl the way Hermes' importer does, in Python.
func TestDivertedGolden(t *testing.T) {
	cases, err := filepath.Glob(filepath.Join("testdata", "jsonl", "*", "input.jsonl"))
	if err != nil || len(cases) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, in := range cases {
		dir := filepath.Dir(in)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, "expected.json"))
			if err != nil {
				t.Fatal(err)
			}
			exp, err := pyjson.Parse(string(b))
			if err != nil {
				t.Fatal(err)
			}
			seed, _ := exp.Get("seed")
			want, _ := exp.Get("records")
			d, err := ParseDivertedFile(in)
			if err != nil {
				t.Fatal(err)
			}
			AssignRecoveryIDs(seed.Str, d.Records)
			if len(d.Records) != len(want.List) {
				t.Errorf("%d records, Python has %d; issues: %v", len(d.Records), len(want.List), d.Issues)
			}
			for i := 0; i < min(len(d.Records), len(want.List)); i++ {
				got, w := d.Records[i], want.List[i]
				line, _ := w.Get("line")
				ident, _ := w.Get("identity_json")
				id, _ := w.Get("recovery_id")
				if strings.TrimLeft(line.Int, "0") != itoa(got.Line) {
					t.Errorf("record %d: line %d, Python %s", i, got.Line, line.Int)
				}
				if g := string(IdentityJSON(got.Fields)); g != ident.Str {
					t.Errorf("line %d identity:\n got %+q\nwant %+q", got.Line, g, ident.Str)
				}
				if got.RecoveryID != id.Str {
					t.Errorf("line %d: id %s, Python %s", got.Line, got.RecoveryID, id.Str)
				}
			}
			if d.Lines != len(d.Records)+len(d.Issues) {
				t.Errorf("lines %d != records %d + issues %d", d.Lines, len(d.Records), len(d.Issues))
			}
		})
	}
}

func itoa(n int) string { return pyjson.Int64(int64(n)).Int }

func TestDivertedIssuesAreExplained(t *testing.T) {
	d, err := ParseDivertedFile(filepath.Join("testdata", "jsonl", "mixed", "input.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var invalid, dropped []int
	for _, l := range d.Issues {
		if l.Reason == "" {
			t.Errorf("line %d: no reason", l.Line)
		}
		if l.Invalid {
			invalid = append(invalid, l.Line)
		} else {
			dropped = append(dropped, l.Line)
		}
	}
	if want := []int{1, 3, 7, 8, 9, 10, 17}; !slices.Equal(invalid, want) {
		t.Errorf("invalid lines %v, want %v: %v", invalid, want, d.Issues)
	}
	if want := []int{11, 12, 13}; !slices.Equal(dropped, want) {
		t.Errorf("dropped lines %v, want %v", dropped, want)
	}
	if !slices.Equal(d.Repaired, []int{4}) {
		t.Errorf("repaired %v", d.Repaired)
	}
	if d.Blank != 2 {
		t.Errorf("blank %d", d.Blank)
	}
	if len(d.Invalid()) != 7 {
		t.Errorf("Invalid() = %v", d.Invalid())
	}
}

// TestDivertedHugeLine: a 10 MB line parses (no 64 KiB scanner limit), and
// an empty file is zero lines, not an error.
func TestDivertedHugeLine(t *testing.T) {
	big := strings.Repeat("x", 10<<20)
	in := `{"role": "user", "content": "a", "timestamp": 1}` + "\n" +
		`{"role": "user", "content": "` + big + `", "timestamp": 2}` + "\n" +
		`{"role": "user", "content": "b", "timestamp": 3}`
	d, err := ParseDiverted(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Records) != 3 {
		t.Fatalf("%d records", len(d.Records))
	}
	if c, _ := d.Records[1].Get("content"); c.Str != big {
		t.Fatal("big content changed")
	}
	d, err = ParseDiverted(bytes.NewReader(nil))
	if err != nil || d.Lines != 0 || len(d.Records) != 0 {
		t.Fatalf("empty: %+v %v", d, err)
	}
}

func TestSessionIDFor(t *testing.T) {
	for in, want := range map[[2]string]string{
		{"/x/20261129_120000_abc.jsonl", ""}:   "20261129_120000_abc",
		{"/x/a.b.jsonl", ""}:                   "a.b",
		{"/x/.jsonl", ""}:                      ".jsonl",
		{"/x/noext", ""}:                       "noext",
		{"/x/trailing.", ""}:                   "trailing.",
		{"/x/s.jsonl", "  given  "}:            "given",
		{"relative/dir/sess.jsonl", "\t"}:      "sess",
		{"/x/recovered/inc-1/s-9.jsonl", "s9"}: "s9",
	} {
		if got := SessionIDFor(in[0], in[1]); got != want {
			t.Errorf("SessionIDFor(%q, %q) = %q, want %q", in[0], in[1], got, want)
		}
	}
}
