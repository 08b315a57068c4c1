package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// TestCompletionCoversTheVerbTable: the script is built from the verb
// table and every verb's own flags, so a verb or flag added later is
// completed without touching the completion code.
func TestCompletionCoversTheVerbTable(t *testing.T) {
	var out, errb bytes.Buffer
	e := newEnv(strings.NewReader(""), &out, &errb, func(string) string { return "" })
	if code := runCLI(context.Background(), e, []string{"completion", "bash"}); code != exitOK {
		t.Fatalf("completion bash: exit %d: %s", code, errb.String())
	}
	script := out.String()
	for _, c := range commands {
		if !strings.Contains(script, "\n    "+c.name+")\n") {
			t.Errorf("verb %s has no case in the bash script", c.name)
		}
		var fs *flag.FlagSet
		de := *e
		de.stdout, de.stderr = &bytes.Buffer{}, &bytes.Buffer{}
		de.describe = func(f *flag.FlagSet) { fs = f }
		c.run(context.Background(), &de, []string{"--help"})
		if fs == nil {
			t.Errorf("verb %s never hands over its flags in describe mode", c.name)
			continue
		}
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(script, "--"+f.Name) && !strings.Contains(script, "-"+f.Name+"|") {
				t.Errorf("flag --%s of %s is not in the script", f.Name, c.name)
			}
		})
	}
	if strings.Contains(script, completeVerb+")") {
		t.Errorf("the hidden %s verb is offered as a verb", completeVerb)
	}
}

// TestBashCompletionLoads: the bash script sources cleanly in a real bash
// and completes verbs, a verb's flags and, through the real agentctl,
// the profile names of the Hermes home.
func TestBashCompletionLoads(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "agentctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build agentctl: %v\n%s", err, out)
	}
	home := filepath.Join(dir, "hermes")
	for _, db := range []string{filepath.Join(home, "state.db"), filepath.Join(home, "profiles", "work", "state.db")} {
		if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := hermestest.CreateStore(db); err != nil {
			t.Fatal(err)
		}
	}
	complete := func(words ...string) string {
		t.Helper()
		script := `set -e
source <("$AGENTCTL" completion bash)
COMP_WORDS=("$AGENTCTL" "$@")
COMP_CWORD=$#
_agentctl
printf '%s\n' "${COMPREPLY[@]}"`
		cmd := exec.Command(bash, append([]string{"-c", script, "bash"}, words...)...)
		cmd.Env = []string{"AGENTCTL=" + bin, "HERMES_HOME=" + home, "HOME=" + dir, "PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("complete %q: %v\n%s", words, err, out)
		}
		return strings.Join(strings.Fields(string(out)), " ")
	}
	if got := complete("inc"); got != "incident incidents" {
		t.Errorf("verbs for \"inc\": %q", got)
	}
	if got := complete("status", "--pro"); got != "--profile" {
		t.Errorf("flags of status for \"--pro\": %q", got)
	}
	if got := complete("status", "--profile", ""); got != "default work" {
		t.Errorf("profiles: %q, want the home's default and work", got)
	}
	if got := complete("completion", ""); got != "bash zsh fish" {
		t.Errorf("shells: %q", got)
	}
}
