//go:build linux

package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// A Hermes-like writer refuses its writes after a restore while no agentd
// runs and diverts them to sessions/s1.jsonl: status shows the rows
// waiting, a replay adds them, and then nothing waits; a second replay
// (Hermes' own import computes the same ids) adds none.
func TestStatusShowsHermesDiverts(t *testing.T) {
	home := t.TempDir()
	db := filepath.Join(home, "state.db")
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, Rate: 200, HermesGuards: true})
	w.WaitAcks(t, 10)
	hermestest.RestoreOver(t, db)
	hermestest.Eventually(t, "diverted acks", 10*time.Second, func() bool {
		n := 0
		for _, a := range w.Acks(t) {
			if a.ID == -1 {
				n++
			}
		}
		return n >= 5
	})
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	diverted := 0
	for _, a := range w.Acks(t) {
		if a.ID == -1 {
			diverted++
		}
	}
	jsonl := filepath.Join(home, "sessions", "s1.jsonl")
	vars := noDaemon(t)

	st := decodeStatus(t, ctl(t, vars, "status", "--json", "--home", home))
	ds := storeOf(t, st, db).HermesDiverts
	if len(ds) != 1 || ds[0].Path != jsonl || ds[0].Waiting != diverted || ds[0].Records != diverted {
		t.Fatalf("hermes diverts %+v, want %s with %d waiting", ds, jsonl, diverted)
	}
	if r := ctl(t, vars, "status", "--home", home); !strings.Contains(r.stdout, "hermes diverts") {
		t.Fatalf("status does not show the divert:\n%s", r.stdout)
	}
	dvars := map[string]string{"HERMES_HOME": home}
	for k, v := range vars {
		dvars[k] = v
	}
	if r := ctl(t, dvars, "doctor"); !strings.Contains(r.stdout, "waiting: ") || !strings.Contains(r.stdout, jsonl) {
		t.Fatalf("doctor does not list the divert:\n%s", r.stdout)
	}
	for range 2 {
		if r := ctl(t, vars, "replay", jsonl, "--db", db, "--now"); r.code != 0 {
			t.Fatalf("replay: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	}
	st = decodeStatus(t, ctl(t, vars, "status", "--json", "--home", home))
	if ds := storeOf(t, st, db).HermesDiverts; len(ds) != 0 {
		t.Fatalf("still waiting after the replay: %+v", ds)
	}
	var n int
	if err := hermestest.OpenDB(t, "file:"+db+"?mode=ro").QueryRow(`SELECT count(*) FROM messages`).Scan(&n); err != nil || n != diverted {
		t.Fatalf("%d rows in the store after two replays, want %d (%v)", n, diverted, err)
	}
}
