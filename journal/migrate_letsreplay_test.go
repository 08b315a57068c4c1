package journal

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// A journal written before the engine journaled LetsReplay keeps the rule
// its incidents were written under: those in a state that held replay
// back still hold it back after the migration, the others let it run.
func TestMigrationKeepsReplayRuleOfOldIncidents(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	db := rawDB(t, path)
	for _, m := range ms[:2] {
		if _, err := db.Exec(m.sql); err != nil {
			t.Fatalf("migration %d: %v", m.version, err)
		}
	}
	if _, err := db.Exec(fmt.Sprintf("PRAGMA application_id = %d; PRAGMA user_version = 2", applicationID)); err != nil {
		t.Fatal(err)
	}
	held := map[State]bool{StateOpen: true, StateFrozen: true, StatePinned: true, StateReleased: true,
		StateCaptured: true, StateNeedsAction: true}
	for _, s := range States() {
		if _, err := db.Exec(`INSERT INTO incidents (id, store, kind, state, opened_at, updated_at) VALUES (?, ?, 'replaced', ?, 1, 1)`,
			"inc-"+string(s), "/s/"+string(s), string(s)); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	j, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, s := range States() {
		inc, err := j.GetIncident(ctx, "inc-"+string(s))
		if err != nil {
			t.Fatal(err)
		}
		if inc.LetsReplay == held[s] {
			t.Errorf("old incident in %s: LetsReplay %v after the migration, want %v", s, inc.LetsReplay, !held[s])
		}
		if _, err := j.EnqueueJob(ctx, Job{IncidentID: inc.ID, Store: inc.Store, Path: "/r/" + string(s) + ".jsonl"}); err != nil {
			t.Fatal(err)
		}
	}
	claimed := map[string]bool{}
	for {
		job, ok, err := j.ClaimNextJob(ctx, j.now().Add(1e9))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		claimed[job.Store] = true
	}
	for _, s := range States() {
		if claimed["/s/"+string(s)] == held[s] {
			t.Errorf("store of an old %s incident: job claimed %v, want %v", s, claimed["/s/"+string(s)], !held[s])
		}
	}
}
