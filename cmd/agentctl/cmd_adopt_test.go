package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// adoptHome is a Hermes home whose default store holds the lineage
// root <- leaf, and a profile "work" to adopt it into.
func adoptHome(t *testing.T) (home, donor, recipient string) {
	t.Helper()
	home, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	donor = filepath.Join(home, "state.db")
	recipient = filepath.Join(home, "profiles", "work", "state.db")
	if err := os.MkdirAll(filepath.Dir(recipient), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{donor, recipient} {
		if err := hermestest.CreateStore(db); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	w, err := store.OpenWritable(ctx, donor)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.InTx(ctx, func(tx *store.Tx) error {
		if err := tx.CreateSession(store.Session{ID: "root", Source: "cli", Title: sql.NullString{String: "t", Valid: true}}); err != nil {
			return err
		}
		if err := tx.CreateSession(store.Session{ID: "leaf", Source: "cli", ParentSessionID: sql.NullString{String: "root", Valid: true}}); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	appendRows(t, donor, "root", 3)
	appendRows(t, donor, "leaf", 2)
	return home, donor, recipient
}

func TestAdoptVerb(t *testing.T) {
	home, donor, recipient := adoptHome(t)
	vars := noDaemon(t)
	r := ctl(t, vars, "adopt", "--from", "default", "--to", "work", "--session", "leaf", "--home", home, "--json")
	if r.code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var rep recovery.AdoptReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	if rep.Donor != donor || rep.Recipient != recipient || len(rep.Segments) != 2 || !rep.DonorRetired ||
		rep.Segments[0].ID != "root" || rep.Segments[0].Imported != 3 || rep.Segments[1].Imported != 2 {
		t.Fatalf("report %+v", rep)
	}
	if _, n := storeRows(t, recipient); n != 5 {
		t.Fatalf("recipient has %d messages", n)
	}
	r = ctl(t, vars, "adopt", "--from", "default", "--to", "work", "--session", "leaf", "--home", home)
	if r.code != exitOK || !strings.Contains(r.stdout, "already_adopted") || !strings.Contains(r.stdout, "donor_retired: true") {
		t.Fatalf("second run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if _, n := storeRows(t, recipient); n != 5 {
		t.Fatalf("second run changed the recipient: %d messages", n)
	}
}

func TestAdoptVerbPartialAndErrors(t *testing.T) {
	home, donor, _ := adoptHome(t)
	vars := noDaemon(t)
	c, err := sql.Open("sqlite", donor)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec("UPDATE sessions SET archived = 1 WHERE id = 'root'"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	r := ctl(t, vars, "adopt", "--from", "default", "--to", "work", "--session", "leaf", "--home", home)
	if r.code != exitPartial || !strings.Contains(r.stdout, "archived donors are never adopted") || !strings.Contains(r.stdout, "donor_retired: false") {
		t.Fatalf("archived root: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--from", "default", "--to", "work", "--session", "nope", "--home", home}, exitError, "not in the donor store"},
		{[]string{"--from", "default", "--to", "ghost", "--session", "leaf", "--home", home}, exitError, "--to: no profile"},
		{[]string{"--from", "work", "--to", "work", "--session", "leaf"}, exitUsage, "same profile"},
		{[]string{"--from", "default", "--session", "leaf"}, exitUsage, "required"},
	}
	for _, tc := range cases {
		r := ctl(t, vars, append([]string{"adopt"}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d %q, want %d %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
}
