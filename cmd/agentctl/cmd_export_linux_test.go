package main

import (
	"strings"
	"testing"
)

func TestExportVerbCapture(t *testing.T) {
	capture, _, _ := captureFixture(t, "sidecar_lost", "inc-x")
	vars := noDaemon(t)
	r := ctl(t, vars, "export", "--capture", capture, "--session", "s1", "--format", "md")
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for seq := 1; seq <= 7; seq++ { // rows 4-7 exist only in the capture's WAL
		if !strings.Contains(r.stdout, "row "+string(rune('0'+seq))) {
			t.Fatalf("capture export lacks row %d:\n%s", seq, r.stdout)
		}
	}
}
