package incident

import (
	"context"
	"fmt"
	"testing"

	"github.com/stateguard/stateguard/journal"
)

// moveRig opens, straight in the journal, an incident of a store of its
// own (named by tag) in state from (entered from prev), and lists it with the engine as
// a resumed agent would, without touching a holder.
func moveRig(t *testing.T, r *rig, from, prev journal.State, tag string) *live {
	t.Helper()
	ctx := context.Background()
	store := fmt.Sprintf("%s/%s-%s-%s", r.dir, from, prev, tag)
	inc, err := r.j.OpenIncident(ctx, journal.Incident{Store: store, Kind: journal.KindReplaced, State: pinned})
	if err != nil {
		t.Fatal(err)
	}
	cur := inc.State
	for _, s := range []journal.State{prev, from} {
		if s == "" || s == cur {
			continue
		}
		cur = s
		if _, err := r.j.UpdateIncident(ctx, inc.ID, journal.Step{Name: "test.setup"}, func(i *journal.Incident) error {
			i.State, i.LetsReplay = s, r.eng.table[s].letsReplay
			return nil
		}); err != nil {
			t.Fatalf("set up %s: %v", s, err)
		}
	}
	li := &live{id: inc.ID, kind: journal.KindReplaced, state: from, prev: prev}
	r.eng.add(li)
	return li
}

// The engine's table is the only rule. Every (state, next state) pair is
// walked through the engine (enter) and the journal: the engine moves
// exactly along the table, the journal then holds what the engine decided
// (state, and whether it lets replay run, which the journal's replay gate
// obeys), and a move the table refuses leaves both where they were.
func TestTableIsTheOnlyRule(t *testing.T) {
	r := newRig(t, 0)
	ctx := context.Background()
	for _, s := range journal.States() {
		if r.eng.table[s].terminal != s.Terminal() {
			t.Errorf("%s: terminal %v in the table, %v in the journal", s, r.eng.table[s].terminal, s.Terminal())
		}
	}
	for _, from := range journal.States() {
		for _, to := range journal.States() {
			if from == to || from.Terminal() {
				continue // no step leaves a terminal state (checked above)
			}
			prev := journal.State("")
			if from == needsAction {
				prev = pinned
			}
			li := moveRig(t, r, from, prev, string(to))
			want := r.eng.allowed(from, to)
			r.eng.enter(li, to, journal.Step{Name: "test.move"}, nil)
			moved := li.state == to
			inc, err := r.j.GetIncident(ctx, li.id)
			if err != nil {
				t.Fatal(err)
			}
			now := map[bool]journal.State{true: to, false: from}[want]
			switch {
			case moved != want:
				t.Errorf("%s → %s: the engine moved %v, the table says %v", from, to, moved, want)
			case li.state != now || inc.State != now:
				t.Errorf("%s → %s: engine at %s, journal at %s, want both %s", from, to, li.state, inc.State, now)
			case inc.LetsReplay != r.eng.table[now].letsReplay:
				t.Errorf("%s → %s: journal lets replay %v, the table %v", from, to, inc.LetsReplay, r.eng.table[now].letsReplay)
			}
			if _, err := r.j.EnqueueJob(ctx, journal.Job{IncidentID: li.id, Store: inc.Store, Path: inc.Store + ".jsonl"}); err != nil {
				t.Fatal(err)
			}
			job, ok, err := r.j.ClaimNextJob(ctx, r.now.Add(1e12))
			if err != nil {
				t.Fatal(err)
			}
			if ok != r.eng.table[now].letsReplay {
				t.Errorf("%s → %s: replay job claimed %v in %s, the table lets replay %v", from, to, ok, now, r.eng.table[now].letsReplay)
			}
			if ok {
				if _, err := r.j.FinishJob(ctx, job.ID, journal.JobResult{}); err != nil {
					t.Fatal(err)
				}
			}
			r.eng.forget(li)
		}
	}
}

// A move the table gains needs no change to the journal, and the replay
// gate follows what the table says of a state, not a list of its own.
func TestTableChangeNeedsNoJournalChange(t *testing.T) {
	r := newRig(t, 0)
	ctx := context.Background()
	ent := r.eng.table[diverted]
	ent.next = append(ent.next, captured) // a divert found wanting, taken again
	r.eng.table[diverted] = ent
	ent = r.eng.table[captured]
	ent.letsReplay = true
	r.eng.table[captured] = ent

	li := moveRig(t, r, diverted, "", "x")
	if r.eng.enter(li, captured, journal.Step{Name: "test.move"}, nil); li.state != captured {
		t.Fatal("the engine refused a move its table has")
	}
	inc, err := r.j.GetIncident(ctx, li.id)
	if err != nil {
		t.Fatal(err)
	}
	if inc.State != captured || !inc.LetsReplay {
		t.Fatalf("journal holds %s (lets replay %v), want captured as the engine decided", inc.State, inc.LetsReplay)
	}
	if _, err := r.j.EnqueueJob(ctx, journal.Job{IncidentID: li.id, Store: inc.Store, Path: inc.Store + ".jsonl"}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := r.j.ClaimNextJob(ctx, r.now.Add(1e12)); err != nil || !ok {
		t.Fatalf("the replay gate held back a job the table lets run: %v %v", ok, err)
	}
}

// Resume, the retry and Release read how far an incident dealt with its
// holders from the table (phase), a needs_action from the state it was
// entered from.
func TestPhaseFromTable(t *testing.T) {
	r := newRig(t, 0)
	for _, c := range []struct {
		state, prev journal.State
		want        phase
	}{
		{open, "", beforeRelease}, {frozen, open, beforeRelease}, {pinned, frozen, beforeRelease},
		{released, pinned, afterRelease}, {captured, released, afterCapture}, {diverted, captured, afterCapture},
		{replaying, diverted, afterCapture},
		{needsAction, pinned, beforeRelease}, {needsAction, frozen, beforeRelease}, {needsAction, released, afterRelease},
		{needsAction, captured, afterRelease}, // not a move the table has: treated as after release
		{needsAction, "", afterRelease},
	} {
		if got := r.eng.phaseOf(&live{state: c.state, prev: c.prev}); got != c.want {
			t.Errorf("%s (from %q): phase %d, want %d", c.state, c.prev, got, c.want)
		}
	}
}
