package manpage

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

const usage = `usage: demo <verb> [flags]

  run        run the thing in the foreground
  status     what the service manager says (exit 0 running, 3 not running)

Exit codes: 0 ok, 1 error, 2 usage.
`

func TestParseVerbs(t *testing.T) {
	got := ParseVerbs(usage)
	want := []Verb{
		{Name: "run", Summary: "run the thing in the foreground"},
		{Name: "status", Summary: "what the service manager says (exit 0 running, 3 not running)"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func demoPage() Page {
	return Page{
		Name: "demo", Version: "1.2.3", Date: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC),
		Summary:     "a demo with a back\\slash",
		Description: "First paragraph,\n.starting a line with a dot.\n\nSecond 'one'.",
		Verbs: []Verb{
			{Name: "run", Summary: "run the thing", Help: "Usage of demo run:\n  -config string\n    \tconfig file (default /etc/demo.toml)\n'quoted first\n"},
			{Name: "status", Summary: "status --json"},
		},
		ExitStatus: "0 ok; 2 usage.",
		Files:      [][2]string{{"/etc/demo.toml", "configuration"}},
		SeeAlso:    []string{"agentd(1)", "systemctl(1)"},
	}
}

// TestRoffGolden: testdata/manpage/<case>/want.1 (go test -update rewrites).
func TestRoffGolden(t *testing.T) {
	got := demoPage().Roff()
	path := filepath.Join("testdata", "manpage", "two-verbs", "want.1")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("roff differs from %s (go test -update to accept):\n%s", path, got)
	}
	for _, bad := range []string{"\n.starting", "\n'quoted", "back\\slash", " -config"} {
		if bytes.Contains(got, []byte(bad)) {
			t.Errorf("unescaped %q in the page", bad)
		}
	}
}

// TestRoffRendersCleanly: groff (groff-base, which man-db needs) renders
// the page without a warning, and the rendered text keeps the help's
// flags as plain ASCII.
func TestRoffRendersCleanly(t *testing.T) {
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skip("groff is not installed (Debian package groff-base)")
	}
	cmd := exec.Command(groff, "-man", "-Tutf8", "-ww")
	cmd.Stdin = bytes.NewReader(demoPage().Roff())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("groff: %v\n%s", err, errb.String())
	}
	if errb.Len() > 0 {
		t.Errorf("groff warns:\n%s", errb.String())
	}
	text := stripOverstrike(out.String())
	for _, want := range []string{"-config string", "config file (default /etc/demo.toml)", ".starting a line with a dot", "'quoted first", "a back\\slash"} {
		if !strings.Contains(text, want) {
			t.Errorf("rendered page lacks %q:\n%s", want, text)
		}
	}
}

// stripOverstrike removes the backspace sequences grotty uses for bold and
// underline.
func stripOverstrike(s string) string {
	var b strings.Builder
	r := []rune(s)
	for i := 0; i < len(r); i++ {
		if i+1 < len(r) && r[i+1] == '\b' {
			i++
			continue
		}
		b.WriteRune(r[i])
	}
	return b.String()
}
