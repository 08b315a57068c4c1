package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// agentd's own error lines escape what the path they quote carries: a
// config path with an ESC and a CSI (U+009B) reaches stderr as \x1b and
// \u009b, not as control characters.
func TestAgentdStderrEscapesControlCharacters(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "x\x1b[2J\u009b31m", "agentd.toml")
	out, err := exec.Command(agentdBinary(t), "run", "--config", cfg).CombinedOutput()
	if err == nil {
		t.Fatalf("agentd run with a missing config started:\n%s", out)
	}
	if strings.ContainsAny(string(out), "\x1b\u009b") {
		t.Fatalf("agentd printed a raw control character: %q", out)
	}
	if !strings.Contains(string(out), `x\x1b[2J\u009b31m`) {
		t.Fatalf("agentd's error does not name the path, escaped: %q", out)
	}
}
