package incident

import (
	"context"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/journal"
)

// The agent dies in the capture before release (a crash, the watchdog)
// at the incident's opening and again in the next agent: the third agent
// does not run that step again. It parks the incident (journaled, an
// error event), resumes the frozen writer, and waits for an operator's
// release, which runs the step again.
func TestStepThatKilledTwoAgentsIsParked(t *testing.T) {
	r := newRig(t, 0)
	deaths := 0
	r.hooks = Hooks{BeforeStep: func(_ string, s journal.State) {
		if s == pinned {
			deaths++
			panic(crash{"capture before release"})
		}
	}}
	r.start()
	w := r.writer(301, true, true)
	var id string
	if !survive(func() { id = r.open(journal.KindReplaced, PolicyKill, w) }) {
		t.Fatal("the hook did not stop the agent in the pinned step")
	}
	if incs := r.incidents(); len(incs) == 1 {
		id = incs[0].ID
	}
	again := func() {
		t.Helper()
		r.eng.Close()
		r.start()
		incs, err := r.j.Unfinished(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		survive(func() {
			for _, inc := range incs {
				r.eng.Resume(inc)
			}
			r.eng.Advance()
		})
	}
	again() // the second agent dies in it too
	again() // the third parks it
	if deaths != 2 {
		t.Fatalf("the step ran %d times, want it parked after 2", deaths)
	}
	inc := r.incident(id)
	if !strings.Contains(inc.Detail.Parked, "2 agents in a row died") || !r.hasStep(id, journal.StepNote) {
		t.Fatalf("incident %s: %s, parked %q", id, inc.State, inc.Detail.Parked)
	}
	if s := r.procs.procs[301].state; s == 'T' {
		t.Errorf("the parked incident's writer is still frozen")
	}
	again() // a fourth agent: still parked, nothing run
	if deaths != 2 {
		t.Fatalf("a parked step ran again after a restart")
	}
	r.hooks = Hooks{}
	r.start()
	incs, _ := r.j.Unfinished(context.Background())
	for _, inc := range incs {
		r.eng.Resume(inc)
	}
	if err := r.eng.Release(id, PolicyKill); err != nil {
		t.Fatal(err)
	}
	if got := r.settle(id); got.Detail.Parked != "" || got.State == needsAction {
		t.Errorf("after the release: %s, parked %q", got.State, got.Detail.Parked)
	}
}
