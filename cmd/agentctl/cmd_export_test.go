package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

func TestExportVerb(t *testing.T) {
	f := newRestoreFixture(t, 4)
	appendRows(t, f.db, "s2", 1)
	vars := noDaemon(t)
	r := ctl(t, vars, "export", "--profile", "default", "--home", f.home, "--session", "s1")
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	x, err := recovery.ParseExportJSON(strings.NewReader(r.stdout))
	if err != nil || x.SessionID != "s1" || len(x.Messages) != 4 {
		t.Fatalf("json export: %v %+v", err, x)
	}

	out := filepath.Join(t.TempDir(), "s1.html")
	r = ctl(t, vars, "export", "--db", f.db, "--session", "s1", "--format", "html", "-o", out)
	if r.code != exitOK || !strings.Contains(r.stderr, "4 messages") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	fi, err := os.Lstat(out)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("output file %v %v", fi, err)
	}
	page, _ := os.ReadFile(out)
	for i := range 4 {
		if !strings.Contains(string(page), "s1 row "+string(rune('0'+i))) {
			t.Fatalf("html lacks row %d", i)
		}
	}
	if r := ctl(t, vars, "export", "--db", f.db, "--session", "s1", "-o", out); r.code != exitError || !strings.Contains(r.stderr, "never overwrites") {
		t.Fatalf("existing -o: exit %d %s", r.code, r.stderr)
	}

	// --redact, md.
	c := ctl(t, vars, "export", "--db", f.db, "--session", "s1", "--format", "md")
	if c.code != exitOK || !strings.Contains(c.stdout, "### 4 · user") {
		t.Fatalf("md: exit %d\n%s", c.code, c.stdout)
	}

	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--db", f.db, "--session", "nope"}, exitError, "no such session"},
		{[]string{"--db", f.db}, exitUsage, "--session is required"},
		{[]string{"--db", f.db, "--session", "s1", "--format", "pdf"}, exitUsage, "want json, md or html"},
		{[]string{"--db", f.db, "--capture", "/x", "--session", "s1"}, exitUsage, "--capture"},
	}
	for _, tc := range cases {
		r := ctl(t, vars, append([]string{"export"}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d %q, want %d %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
}

func TestExportVerbRedact(t *testing.T) {
	vars := noDaemon(t)
	f := newRestoreFixture(t, 0)
	secret := "sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOp"
	appendSecret(t, f.db, "use "+secret+" with password=hunter2 please")
	for _, format := range []string{"json", "md", "html"} {
		r := ctl(t, vars, "export", "--db", f.db, "--session", "s1", "--format", format, "--redact")
		if r.code != exitOK || strings.Contains(r.stdout, secret) || strings.Contains(r.stdout, "hunter2") ||
			!strings.Contains(r.stdout, "use [REDACTED] with password=[REDACTED] please") {
			t.Fatalf("%s --redact: exit %d\n%s", format, r.code, r.stdout)
		}
	}
}

// appendSecret appends a message to the existing session s1.
func appendSecret(t *testing.T, db, content string) {
	t.Helper()
	writeTx(t, db, func(_ context.Context, tx *store.Tx) error {
		_, err := tx.AppendMessage(store.Message{SessionID: "s1", Role: "user",
			Content: sql.NullString{String: content, Valid: true}, Timestamp: sql.NullFloat64{Float64: 1.75e9, Valid: true}})
		return err
	})
}
