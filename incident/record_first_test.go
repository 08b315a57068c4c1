package incident

import (
	"database/sql"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stateguard/stateguard/journal"
)

// failJournalWrites makes every change to an incident row fail while on,
// as a journal on a full or failing disk would: a trigger in the journal
// itself, so the engine sees the real error path.
func (r *rig) failJournalWrites(on bool) {
	r.t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(r.dir, "journal.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		r.t.Fatal(err)
	}
	defer db.Close()
	q := `CREATE TRIGGER IF NOT EXISTS test_fail BEFORE UPDATE ON incidents BEGIN SELECT RAISE(ABORT, 'disk I/O error (test)'); END`
	if !on {
		q = `DROP TRIGGER IF EXISTS test_fail`
	}
	if _, err := db.Exec(q); err != nil {
		r.t.Fatal(err)
	}
}

// A step whose record cannot be written does not move the incident: the
// engine stays where the journal says (so it never acts on a state a
// restarted agent would not find), and the step runs again once the
// journal takes writes. Before, the in-memory state moved on, and the
// holder was killed while the journal still said frozen.
func TestStateMovesOnlyWithItsRecord(t *testing.T) {
	r := newRig(t, 0)
	p := r.writer(101, true, false)
	r.failJournalWrites(true)
	id := r.open(journal.KindReplaced, PolicyKill, p)
	r.eng.Advance()
	inc := r.incident(id)
	li := r.liveOf(id)
	if li == nil {
		t.Fatal("incident not live")
	}
	if inc.State != frozen || li.state != frozen {
		t.Fatalf("with the journal failing: engine at %s, journal at %s; want both frozen", li.state, inc.State)
	}
	if slices.Contains(r.procs.sent(), "kill 101") {
		t.Fatalf("holder killed while the journal could not record it: %v", r.procs.sent())
	}
	if len(li.pins) == 0 {
		t.Fatal("the pins went with a step the journal did not record")
	}
	r.failJournalWrites(false)
	r.eng.Advance()
	if got := r.settle(id); got.State != resolved {
		t.Fatalf("once the journal takes writes: %s (%s), want resolved", got.State, got.Detail.Error)
	}
	if left := r.procs.stopped(); len(left) > 0 {
		t.Errorf("processes left stopped %v", left)
	}
}
