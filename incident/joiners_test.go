package incident

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// TestQuarantineWaitsForJoiner: a process that is no holder of a
// mispaired incident (a backup reading the store) opened the new main
// with the old generation's -wal/-shm before the quarantine. Leaving the
// sidecars in place would have every later opener read the old frames
// over the new main, a malformed store (chaos seed 2, pace 0.4: a
// `sqlite3 .backup` between a cp over the main and the quarantine). The
// release waits for it, the writers frozen; once it is gone the sidecars
// are quarantined. One that stays past joinerMaxWait gets the old
// answer: files left in place, the incident says so.
func TestQuarantineWaitsForJoiner(t *testing.T) {
	for _, leaves := range []bool{true, false} {
		name := "joiner stays"
		if leaves {
			name = "joiner leaves"
		}
		t.Run(name, func(t *testing.T) {
			r := newRig(t, store.Hermes)
			r.writer(202, false, false) // running, holds a current -wal/-shm, no holder of the incident
			id := r.open(journal.KindMispaired, PolicyKill, r.writer(201, true, false))
			r.eng.Advance()
			if q := r.incident(id).Detail.Quarantined; len(q) != 0 {
				t.Fatalf("quarantined %v under a live joiner", q)
			}
			if slices.Contains(r.procs.sent(), "kill 201") {
				t.Fatalf("holder released before the quarantine: signals %v", r.procs.sent())
			}
			if leaves {
				r.procs.exit(202)
				r.eng.Advance()
			}
			inc := r.settle(id)
			if inc.State != resolved {
				t.Fatalf("incident ended %s (%s)", inc.State, inc.Detail.Error)
			}
			if leaves && len(inc.Detail.Quarantined) != 2 {
				t.Errorf("quarantined %v once the joiner left; want -wal and -shm", inc.Detail.Quarantined)
			}
			if !leaves && (len(inc.Detail.Quarantined) != 0 || !noted(t, r, id, "check the store by hand")) {
				t.Errorf("quarantined %v; want the files left in place, said so in a note", inc.Detail.Quarantined)
			}
		})
	}
}

// noted reports whether a journal step of id says what.
func noted(t *testing.T, r *rig, id, what string) bool {
	t.Helper()
	steps, err := r.j.Steps(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		if strings.Contains(fmt.Sprint(s.Detail), what) {
			return true
		}
	}
	return false
}
