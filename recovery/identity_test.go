package recovery

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/pyjson"
)

// vectorsPath is the ground truth computed once with Python's json module
// (see the README beside it).
const vectorsPath = "testdata/recovery-id/vectors.json"

type idVectors struct {
	Path     string   `json:"path"`
	Lines    []string `json:"lines"`
	Expected []*struct {
		IdentityJSON string `json:"identity_json"`
		RecoveryID   string `json:"recovery_id"`
	} `json:"expected"`
}

func loadVectors(t *testing.T) idVectors {
	t.Helper()
	b, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatalf("recovery-id vectors: %v", err)
	}
	var v idVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Lines) == 0 || len(v.Lines) != len(v.Expected) {
		t.Fatalf("vectors: %d lines, %d expected", len(v.Lines), len(v.Expected))
	}
	return v
}

func TestRecoveryIDVectors(t *testing.T) {
	v := loadVectors(t)
	d, err := ParseDiverted(strings.NewReader(strings.Join(v.Lines, "\n") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	AssignRecoveryIDs(v.Path, d.Records)
	byLine := map[int]Record{}
	for _, r := range d.Records {
		byLine[r.Line] = r
	}
	for i, want := range v.Expected {
		got, ok := byLine[i+1]
		if want == nil {
			if ok {
				t.Errorf("line %d: want skipped, got record %s", i+1, got.Fields.Dumps(pyjson.DumpOptions{}))
			}
			continue
		}
		if !ok {
			t.Errorf("line %d: skipped (%v), want a record", i+1, d.Issues)
			continue
		}
		if id := string(IdentityJSON(got.Fields)); id != want.IdentityJSON {
			t.Errorf("line %d identity:\n got %q\nwant %q", i+1, id, want.IdentityJSON)
		}
		if got.RecoveryID != want.RecoveryID {
			t.Errorf("line %d recovery id: got %s want %s", i+1, got.RecoveryID, want.RecoveryID)
		}
		meta, _ := got.Get("display_metadata")
		if id, _ := meta.Get(RecoveryIDKey); id.Str != want.RecoveryID {
			t.Errorf("line %d: display_metadata %s lacks the id", i+1, meta.Dumps(pyjson.DumpOptions{}))
		}
	}
	if len(d.Records)+len(d.Issues) != len(v.Lines) {
		t.Errorf("records %d + issues %d != lines %d", len(d.Records), len(d.Issues), len(v.Lines))
	}
}

// TestRecoveryIDGrowingFile: a file that grows keeps the ids of its
// earlier lines, and the ids depend on the path.
func TestRecoveryIDGrowingFile(t *testing.T) {
	v := loadVectors(t)
	ids := func(path string, lines []string) []string {
		d, err := ParseDiverted(strings.NewReader(strings.Join(lines, "\n")))
		if err != nil {
			t.Fatal(err)
		}
		AssignRecoveryIDs(path, d.Records)
		var out []string
		for _, r := range d.Records {
			out = append(out, r.RecoveryID)
		}
		return out
	}
	full := ids(v.Path, v.Lines)
	head := ids(v.Path, v.Lines[:4])
	for i := range head {
		if head[i] != full[i] {
			t.Fatalf("id %d changed when the file grew", i)
		}
	}
	other := ids(v.Path+"x", v.Lines[:1])
	if other[0] == full[0] {
		t.Fatal("the path does not seed the chain")
	}
}

// TestResolveJSONLPath: the seed is the symlink-resolved absolute path, and
// "link/.." is resolved physically as Python's realpath does.
func TestResolveJSONLPath(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(real, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "a", "s.jsonl")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(file, filepath.Join(dir, "ln.jsonl")); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{
		file,
		filepath.Join(dir, "ln.jsonl"),
		dir + "/link/../s.jsonl", // physically a/b/.. = a
	} {
		got, err := ResolveJSONLPath(in)
		if err != nil {
			t.Fatal(err)
		}
		if got != file {
			t.Errorf("ResolveJSONLPath(%s) = %s, want %s", in, got, file)
		}
	}
	t.Chdir(filepath.Join(dir, "link"))
	got, err := ResolveJSONLPath("../s.jsonl")
	if err != nil || got != file {
		t.Errorf("relative through a symlinked cwd: %s %v, want %s", got, err, file)
	}
}
