package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/version"
)

func TestVersionVerb(t *testing.T) {
	var out, errb bytes.Buffer
	if code := cmdVersion(context.Background(), []string{"--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var d version.Document
	if err := json.Unmarshal(out.Bytes(), &d); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if want := version.Build(); d.Program != "agentd" || d.Version != want.Version || d.GoVersion != want.GoVersion || !strings.HasPrefix(d.SQLite, "3.") {
		t.Errorf("document %+v", d)
	}
	if code := cmdVersion(context.Background(), []string{"extra"}, &out, &errb); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}

// TestVersionLdflags builds agentd the way scripts/package does, with the
// release set at link time, and asks the binary: `--version` and `version
// --json` must both report it. This is what breaks if the variable the
// package script names is renamed.
func TestVersionLdflags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds agentd")
	}
	bin := filepath.Join(t.TempDir(), "agentd")
	const release = "9.8.7-ldflags-test"
	build := exec.Command("go", "build",
		"-ldflags", "-X github.com/stateguard/stateguard/internal/version.version="+release,
		"-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("agentd --version: %v", err)
	}
	if first, _, _ := strings.Cut(string(out), "\n"); first != "agentd "+release {
		t.Errorf("agentd --version: first line %q, want %q", first, "agentd "+release)
	}
	out, err = exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("agentd version --json: %v", err)
	}
	var d version.Document
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if d.Version != release {
		t.Errorf("version --json: version %q, want %q", d.Version, release)
	}
}
