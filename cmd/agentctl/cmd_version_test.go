package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/version"
)

func TestVersionVerb(t *testing.T) {
	want := version.Build()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := ctl(t, nil, args...)
		if r.code != exitOK {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		if first, _, _ := strings.Cut(r.stdout, "\n"); first != "agentctl "+want.Version {
			t.Errorf("%v: first line %q, want %q", args, first, "agentctl "+want.Version)
		}
		if !strings.Contains(r.stdout, "sqlite    3.") {
			t.Errorf("%v: no embedded SQLite version:\n%s", args, r.stdout)
		}
	}

	for _, args := range [][]string{{"version", "--json"}, {"--version", "--json"}} {
		r := ctl(t, nil, args...)
		if r.code != exitOK {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		var d version.Document
		if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, r.stdout)
		}
		if d.Format != version.DocumentFormat || d.Program != "agentctl" || d.Version != want.Version || d.GoVersion != want.GoVersion || !strings.HasPrefix(d.SQLite, "3.") {
			t.Errorf("%v: document %+v", args, d)
		}
	}

	if r := ctl(t, nil, "version", "extra"); r.code != exitUsage {
		t.Errorf("version extra: exit %d, want %d", r.code, exitUsage)
	}
}
