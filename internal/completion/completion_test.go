package completion

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// sample is a program shaped like agentctl, with every kind of value and
// text that needs quoting in each shell.
var sample = Program{
	Name:    "agentctl",
	Dynamic: "__complete",
	Verbs: []Verb{
		{Name: "status", Summary: "one table per store: holders, incidents (it's [all] here: really)", Flags: []Flag{
			{Name: "json", Usage: "print JSON"},
			{Name: "home", Usage: "only this Hermes home (repeatable)", Value: Values{Kind: Dir, Name: "DIR"}, Repeat: true},
			{Name: "profile", Usage: "only this profile (repeatable)", Value: Values{Kind: Dynamic, Source: "profiles", Name: "profile"}, Repeat: true},
			{Name: "config", Usage: `agentd's config file (default "/etc/stateguard/agent.toml")`, Value: Values{Kind: File, Name: "FILE"}},
		}},
		{Name: "export", Summary: "a session with all its messages", Flags: []Flag{
			{Name: "format", Usage: "json, md or html", Value: Values{Kind: Choice, Words: []string{"json", "md", "html"}}},
			{Name: "session", Usage: "session id, exactly", Value: Values{Kind: Word, Name: "ID"}},
			{Name: "o", Usage: "write to FILE", Value: Values{Kind: File, Name: "FILE"}},
		}},
		{Name: "replay", Summary: "replay diverted rows into a store", Args: Values{Kind: File, Name: "FILE"},
			Flags: []Flag{{Name: "now", Usage: "run here and now"}}},
		{Name: "release", Summary: "decide for a held incident", Args: Values{Kind: Dynamic, Source: "incidents", Name: "incident"},
			Flags: []Flag{{Name: "kill", Usage: "kill the holders (SIGKILL)"}}},
		{Name: "guard", Summary: "pause or re-arm a store's guard", Args: Values{Kind: Choice, Words: []string{"off", "on"}}},
		{Name: "doctor", Summary: "check the host\\and explain"},
	},
}

func script(t *testing.T, shell string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, shell, sample); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestGolden pins each script byte for byte, so a change to the
// generator shows up in review. -update rewrites them.
func TestGolden(t *testing.T) {
	for _, shell := range Shells {
		got := script(t, shell)
		path := filepath.Join("testdata", "completion", "sample", "agentctl."+shell)
		if *update {
			os.MkdirAll(filepath.Dir(path), 0o755)
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the generated script:\n%s", path, got)
		}
	}
}

// stubProgram puts an "agentctl" on a PATH of its own that answers the
// dynamic verb as the real one would, and returns that PATH.
func stubProgram(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	stub := "#!/bin/sh\n[ \"$1\" = __complete ] || exit 2\ncase $2 in\nprofiles) printf 'default\\nwork\\nwork-2\\n' ;;\nincidents) printf '20261201T1-a\\n20261201T2-b\\n' ;;\n*) exit 1 ;;\nesac\n"
	if err := os.WriteFile(filepath.Join(dir, "agentctl"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir + string(os.PathListSeparator) + os.Getenv("PATH")
}

func need(t *testing.T, shell string) string {
	t.Helper()
	p, err := exec.LookPath(shell)
	if err != nil {
		t.Skipf("%s is not installed (Debian package %s; .ci/run installs it)", shell, shell)
	}
	return p
}

// workDir is a directory with a subdirectory and a file, for file and
// directory completion.
func workDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	os.Mkdir(filepath.Join(d, "hdir"), 0o755)
	os.WriteFile(filepath.Join(d, "rows.jsonl"), nil, 0o644)
	return d
}

// bashComplete runs the generated function as bash's completion would
// for line (the cursor at its end) and returns what it offers.
func bashComplete(t *testing.T, line string) []string {
	t.Helper()
	bash := need(t, "bash")
	f := filepath.Join(t.TempDir(), "agentctl.bash")
	os.WriteFile(f, script(t, "bash"), 0o644)
	// Split as readline does with the default COMP_WORDBREAKS: spaces,
	// and "=" as a word of its own ("--profile=" ends in the "=" word
	// itself).
	var words []string
	for _, w := range strings.Split(line, " ") {
		if i := strings.Index(w, "="); i > 0 && strings.HasPrefix(w, "-") {
			words = append(words, w[:i], "=")
			if w[i+1:] != "" {
				words = append(words, w[i+1:])
			}
			continue
		}
		words = append(words, w)
	}
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, "'"+w+"'")
	}
	prog := `source "$1" || exit 9
COMP_WORDS=(` + strings.Join(quoted, " ") + `)
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
_agentctl
printf '%s\n' "${COMPREPLY[@]}"
`
	cmd := exec.Command(bash, "--norc", "--noprofile", "-c", prog, "bash", f)
	cmd.Dir = workDir(t)
	cmd.Env = []string{"PATH=" + stubProgram(t), "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash completion of %q: %v\n%s", line, err, out)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			got = append(got, l)
		}
	}
	sort.Strings(got)
	return got
}

func TestBashLoads(t *testing.T) {
	bash := need(t, "bash")
	f := filepath.Join(t.TempDir(), "agentctl.bash")
	os.WriteFile(f, script(t, "bash"), 0o644)
	// What CI runs: source it, then ask bash what it registered.
	out, err := exec.Command(bash, "--norc", "--noprofile", "-c", `source "$1" && complete -p agentctl`, "bash", f).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "complete -F _agentctl agentctl" {
		t.Errorf("bash: %v\n%s", err, out)
	}
}

func TestBashCompletes(t *testing.T) {
	for _, tt := range []struct {
		line string
		want []string
	}{
		{"agentctl ", []string{"doctor", "export", "guard", "release", "replay", "status"}},
		{"agentctl re", []string{"release", "replay"}},
		{"agentctl status --", []string{"--config", "--home", "--json", "--profile"}},
		{"agentctl status --p", []string{"--profile"}},
		{"agentctl status --profile ", []string{"default", "work", "work-2"}},
		{"agentctl status --profile w", []string{"work", "work-2"}},
		{"agentctl status --profile=w", []string{"work", "work-2"}},
		{"agentctl status -profile ", []string{"default", "work", "work-2"}},
		{"agentctl status --home ", []string{"hdir"}},
		{"agentctl status --json --config r", []string{"rows.jsonl"}},
		{"agentctl status --home hdir --profile d", []string{"default"}},
		{"agentctl export --format ", []string{"html", "json", "md"}},
		{"agentctl export --session ", nil},
		{"agentctl export -o ", []string{"hdir", "rows.jsonl"}},
		{"agentctl export -", []string{"--format", "--session", "-o"}},
		{"agentctl replay ", []string{"hdir", "rows.jsonl"}},
		{"agentctl release ", []string{"20261201T1-a", "20261201T2-b"}},
		{"agentctl release --kill 20261201T2", []string{"20261201T2-b"}},
		{"agentctl guard o", []string{"off", "on"}},
		{"agentctl doctor ", nil},
	} {
		if got := bashComplete(t, tt.line); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("bash %q offers %q, want %q", tt.line, got, tt.want)
		}
	}
}

func TestZshLoads(t *testing.T) {
	zsh := need(t, "zsh")
	f := filepath.Join(t.TempDir(), "_agentctl")
	os.WriteFile(f, script(t, "zsh"), 0o644)
	if out, err := exec.Command(zsh, "-n", f).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
	// Sourced after compinit, it registers itself for agentctl; from
	// $fpath, compinit finds it by its #compdef line.
	home := t.TempDir()
	for _, prog := range []string{
		`autoload -U compinit && compinit -u -D && source "$1" && print -r -- $_comps[agentctl]`,
		`fpath=("${1:h}" $fpath) && autoload -U compinit && compinit -u -D && print -r -- $_comps[agentctl]`,
	} {
		cmd := exec.Command(zsh, "-f", "-c", prog, "zsh", f)
		cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "_agentctl" {
			t.Errorf("zsh %s: %v\n%s", prog, err, out)
		}
	}
}

// fishComplete asks fish itself what it would offer for line
// (`complete -C`), with the generated script loaded.
func fishComplete(t *testing.T, line string) []string {
	t.Helper()
	fish := need(t, "fish")
	f := filepath.Join(t.TempDir(), "agentctl.fish")
	os.WriteFile(f, script(t, "fish"), 0o644)
	cmd := exec.Command(fish, "--no-config", "-c", `source $argv[1]; and complete -C $argv[2]`, f, line)
	cmd.Dir = workDir(t)
	cmd.Env = []string{"PATH=" + stubProgram(t), "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fish completion of %q: %v\n%s", line, err, out)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if c, _, _ := strings.Cut(l, "\t"); c != "" {
			got = append(got, c)
		}
	}
	sort.Strings(got)
	return got
}

func TestFishLoads(t *testing.T) {
	fish := need(t, "fish")
	f := filepath.Join(t.TempDir(), "agentctl.fish")
	os.WriteFile(f, script(t, "fish"), 0o644)
	if out, err := exec.Command(fish, "--no-config", "-n", f).CombinedOutput(); err != nil {
		t.Fatalf("fish -n: %v\n%s", err, out)
	}
}

func TestFishCompletes(t *testing.T) {
	for _, tt := range []struct {
		line string
		want []string
	}{
		{"agentctl ", []string{"doctor", "export", "guard", "release", "replay", "status"}},
		{"agentctl status --", []string{"--config", "--home", "--json", "--profile"}},
		{"agentctl status --profile ", []string{"default", "work", "work-2"}},
		{"agentctl status --profile=w", []string{"--profile=work", "--profile=work-2"}},
		{"agentctl status --home ", []string{"hdir/"}},
		{"agentctl export --format ", []string{"html", "json", "md"}},
		{"agentctl release ", []string{"20261201T1-a", "20261201T2-b"}},
		{"agentctl guard ", []string{"off", "on"}},
		{"agentctl replay r", []string{"rows.jsonl"}},
		// A verb's name as another verb's flag value is not that verb.
		{"agentctl export --session status --", []string{"--format", "--session"}},
	} {
		if got := fishComplete(t, tt.line); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("fish %q offers %q, want %q", tt.line, got, tt.want)
		}
	}
}

func TestValidateRefuses(t *testing.T) {
	for _, p := range []Program{
		{Name: "a b"},
		{Name: "x", Verbs: []Verb{{Name: "v;rm"}}},
		{Name: "x", Verbs: []Verb{{Name: "v"}, {Name: "v"}}},
		{Name: "x", Verbs: []Verb{{Name: "v", Flags: []Flag{{Name: "$(x)"}}}}},
		{Name: "x", Verbs: []Verb{{Name: "v", Args: Values{Kind: Choice, Words: []string{"a'b"}}}}},
		{Name: "x", Verbs: []Verb{{Name: "v", Args: Values{Kind: Dynamic, Source: "profiles"}}}}, // no dynamic verb
	} {
		if err := Write(&bytes.Buffer{}, "bash", p); err == nil {
			t.Errorf("Write accepted %+v", p)
		}
	}
	if err := Write(&bytes.Buffer{}, "tcsh", sample); err == nil {
		t.Error("Write accepted tcsh")
	}
}
