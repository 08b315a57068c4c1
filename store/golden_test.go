package store

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var update = flag.Bool("update", false, "regenerate golden files under testdata/")

// goldenResult is what a golden want.json holds: the parsed value, or the
// error a parser returned.
type goldenResult struct {
	Header any    `json:"header,omitempty"`
	Error  string `json:"error,omitempty"`
}

func goldenJSON(t *testing.T, v any, err error) []byte {
	t.Helper()
	r := goldenResult{Header: v}
	if err != nil {
		r = goldenResult{Error: err.Error()}
	}
	b, jerr := json.MarshalIndent(r, "", "  ")
	if jerr != nil {
		t.Fatal(jerr)
	}
	return append(b, '\n')
}

// runGolden checks every case under testdata/<component>/: parse of
// input.bin must give want.json. With -update, inputs (from makeInputs)
// and wants are rewritten first. The set of cases must be exactly cases,
// so a lost directory fails instead of silently testing less.
func runGolden(t *testing.T, component string, cases []string, makeInputs func(t *testing.T) map[string][]byte, parse func([]byte) (any, error)) {
	dir := filepath.Join("testdata", component)
	if *update {
		inputs := makeInputs(t)
		for _, c := range cases {
			in, ok := inputs[c]
			if !ok {
				t.Fatalf("no input made for case %s", c)
			}
			if err := os.MkdirAll(filepath.Join(dir, c), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, c, "input.bin"), in, 0o644); err != nil {
				t.Fatal(err)
			}
			v, err := parse(in)
			if err := os.WriteFile(filepath.Join(dir, c, "want.json"), goldenJSON(t, v, err), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%v (run with -update to create the golden files)", err)
	}
	var found []string
	for _, e := range entries {
		if e.IsDir() {
			found = append(found, e.Name())
		}
	}
	want := slices.Sorted(slices.Values(cases))
	if !slices.Equal(found, want) {
		t.Fatalf("golden cases in %s: %v, want %v", dir, found, want)
	}
	for _, c := range cases {
		t.Run(c, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join(dir, c, "input.bin"))
			if err != nil {
				t.Fatal(err)
			}
			wantJSON, err := os.ReadFile(filepath.Join(dir, c, "want.json"))
			if err != nil {
				t.Fatal(err)
			}
			v, perr := parse(in)
			if got := goldenJSON(t, v, perr); !bytes.Equal(got, wantJSON) {
				t.Errorf("parse %s/input.bin:\ngot  %s\nwant %s", c, got, wantJSON)
			}
		})
	}
}
