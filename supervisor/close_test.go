package supervisor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// Close, which agentd runs on SIGTERM, while a step of an incident is in
// flight: the journal then says that the step either happened (stopped
// inside it, after its work, before its journal write) or did not start
// (stopped just before it), never half, and a new agent resumes the
// incident to the same end. The step is held at its point by the
// engine's test hooks while Close begins.
func TestCloseMidStep(t *testing.T) {
	for _, state := range []journal.State{journal.StateFrozen, journal.StatePinned, journal.StateReleased,
		journal.StateCaptured, journal.StateDiverted, journal.StateReplaying} {
		for _, point := range []string{"before", "inside"} {
			t.Run(fmt.Sprintf("%s-%s", state, point), func(t *testing.T) { closeMidStep(t, state, point) })
		}
	}
}

func closeMidStep(t *testing.T, state journal.State, point string) {
	home, db := testHome(t)
	reached, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hold := func() { once.Do(func() { close(reached); <-proceed }) }
	hooks := incident.Hooks{
		BeforeStep: func(_ string, s journal.State) {
			if point == "before" && s == state {
				hold()
			}
		},
		BeforeJournal: func(_ string, from, to journal.State, _ string) {
			if point == "inside" && from == state && to != from {
				hold()
			}
		},
	}
	var opts Options
	a := startAgent(t, home, func(o *Options) {
		o.Policies.Replaced, o.Hooks = incident.PolicyKill, hooks
		opts = *o
	})
	// A failure while the step is held must not leave the agent's Close
	// (an earlier cleanup, so it runs after this one) waiting for it
	// until the test binary's timeout.
	var release sync.Once
	letGo := func() { release.Do(func() { close(proceed) }) }
	t.Cleanup(letGo)
	w := startHeldWriter(t, a, db)
	w.AcksGrow(t, 10)
	renamed := hermestest.RestoreOver(t, db)
	closeAtHeldStep(t, a, reached, letGo, string(state))

	inc := onlyIncident(t, opts.StateDir, db)
	next := map[journal.State]journal.State{journal.StateFrozen: journal.StatePinned, journal.StatePinned: journal.StateReleased,
		journal.StateReleased: journal.StateCaptured, journal.StateCaptured: journal.StateDiverted,
		journal.StateDiverted: journal.StateReplaying, journal.StateReplaying: journal.StateResolved}
	want := state
	if point == "inside" {
		want = next[state]
	}
	if inc.State != want {
		t.Fatalf("stopped %s the %s step: journal says %s, want %s", point, state, inc.State, want)
	}
	if state == journal.StateFrozen && point == "before" && hermestest.StateOf(w.Pid) != 'T' {
		t.Fatal("the journal says frozen, but the writer is not stopped")
	}
	if inc.State.Rank() >= journal.StateCaptured.Rank() && inc.Detail.CapturePath == "" {
		t.Fatal("the journal says captured, but names no capture")
	}

	opts.Hooks = incident.Hooks{}
	a2, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a2.Close(context.Background()) })
	got := waitIncident(t, a2, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if got.ID != inc.ID || got.State != journal.StateResolved {
		t.Fatalf("after the restart: incident %s %s (%s)", got.ID, got.State, got.Detail.Error)
	}
	waitExit(t, w, 10*time.Second)
	checkExactlyOnce(t, w.Acks(t), dbRows(t, db), renamed, time.Time{})
}

// onlyIncident reads the store's one incident from the journal of a
// stopped agent.
func onlyIncident(t *testing.T, stateDir, db string) journal.Incident {
	t.Helper()
	j, err := journal.OpenReadOnly(context.Background(), stateDir+"/"+journal.FileName)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	incs, err := j.ListIncidents(context.Background(), journal.ListOptions{Store: db})
	if err != nil || len(incs) != 1 {
		t.Fatalf("incidents %+v (%v), want one", incs, err)
	}
	return incs[0]
}
