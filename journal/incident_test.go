package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
)

func TestIncidentLifecycle(t *testing.T) {
	ctx := context.Background()
	j, _ := openTestJournal(t)

	inc, err := j.OpenIncident(ctx, Incident{
		Store: "/home/u/.hermes/state.db", Profile: "default", Home: "/home/u/.hermes",
		Kind: KindReplaced, Policy: "terminate",
		Detail: IncidentDetail{Holders: []HolderRecord{{PID: 4242, StartTicks: 99, Files: []HolderFile{{Role: "wal", FD: 0, ID: fileid.ID{Dev: 1, Ino: 2}}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^\d{8}T\d{6}Z-[0-9a-f]{6}$`).MatchString(inc.ID) {
		t.Errorf("incident id %q", inc.ID)
	}
	if inc.State != StateOpen || inc.OpenedAt.IsZero() || !inc.ResolvedAt.IsZero() {
		t.Errorf("new incident: %+v", inc)
	}

	path := []struct {
		to   State
		step string
	}{
		{StateFrozen, StepFrozen},
		{StatePinned, StepPinned},
		{StateReleased, StepReleased},
		{StateCaptured, StepCaptureWritten},
		{StateDiverted, StepDiverted},
		{StateReplaying, StepReplayQueued},
	}
	for _, p := range path {
		if err := j.Transition(ctx, inc.ID, p.to, Step{Name: p.step}); err != nil {
			t.Fatalf("→ %s: %v", p.to, err)
		}
	}

	checkRefusedTransitions(t, j, inc.ID)
	got, _ := j.GetIncident(ctx, inc.ID)
	if got.State != StateReplaying || got.PrevState != StateDiverted {
		t.Errorf("after refusals: state %s prev %s", got.State, got.PrevState)
	}

	if err := j.Transition(ctx, inc.ID, StateResolved, Step{Name: StepResolved}); err != nil {
		t.Fatal(err)
	}
	got, _ = j.GetIncident(ctx, inc.ID)
	if got.ResolvedAt.IsZero() || got.State != StateResolved {
		t.Errorf("resolved incident: %+v", got)
	}
	if err := j.Transition(ctx, inc.ID, StateFailed, Step{Name: StepFailed}); !errors.Is(err, ErrInvalidTransition) {
		t.Errorf("resolved → failed = %v, want ErrInvalidTransition", err)
	}

	steps, err := j.Steps(ctx, inc.ID)
	if err != nil {
		t.Fatal(err)
	}
	checkStepLog(t, steps, []string{StepDetected, StepFrozen, StepPinned, StepReleased, StepCaptureWritten, StepDiverted, StepReplayQueued, StepResolved})
	if unfinished, _ := j.Unfinished(ctx); len(unfinished) != 0 {
		t.Errorf("a resolved incident is unfinished: %+v", unfinished)
	}
	if got.Detail.Holders[0].PID != 4242 || got.Detail.Holders[0].Files[0].Role != "wal" {
		t.Errorf("detail lost: %+v", got.Detail)
	}
}

// checkRefusedTransitions: from replaying, an unknown state, the same
// state by another step and a repeat of the last step add nothing to the
// log. Which moves the protocol allows is the engine's table
// (incident.TestTableIsTheOnlyRule), not the journal's.
func checkRefusedTransitions(t *testing.T, j *Journal, id string) {
	t.Helper()
	ctx := context.Background()
	before, _ := j.Steps(ctx, id)
	if err := j.Transition(ctx, id, State("bogus"), Step{Name: StepFrozen}); !errors.Is(err, ErrInvalidTransition) {
		t.Errorf("replaying → bogus = %v, want ErrInvalidTransition", err)
	}
	// Same state under another step name is not a transition either.
	if err := j.Transition(ctx, id, StateReplaying, Step{Name: StepDiverted}); !errors.Is(err, ErrInvalidTransition) {
		t.Errorf("replaying → replaying by another step = %v, want ErrInvalidTransition", err)
	}
	// Repeating the last transition (a resumed worker) is a no-op.
	if err := j.Transition(ctx, id, StateReplaying, Step{Name: StepReplayQueued}); err != nil {
		t.Errorf("repeated transition: %v", err)
	}
	after, _ := j.Steps(ctx, id)
	if len(after) != len(before) {
		t.Errorf("refused or repeated transitions added steps: %d → %d", len(before), len(after))
	}
}

// checkStepLog checks the steps are want, numbered from 1, each from the
// state the one before reached, in time order.
func checkStepLog(t *testing.T, steps []Step, want []string) {
	t.Helper()
	if len(steps) != len(want) {
		t.Fatalf("steps: %+v", steps)
	}
	prev := StateOpen
	for i, s := range steps {
		if s.Seq != int64(i+1) || s.Name != want[i] {
			t.Errorf("step %d: seq %d name %s, want %d %s", i, s.Seq, s.Name, i+1, want[i])
		}
		if i > 0 && (s.From != prev || !s.To.Valid()) {
			t.Errorf("step %d: %s → %s, want from %s", i, s.From, s.To, prev)
		}
		if i > 0 {
			prev = s.To
		}
		if i > 0 && s.At.Before(steps[i-1].At) {
			t.Errorf("step %d at %v before step %d", i, s.At, i-1)
		}
	}
}

// The journal refuses only what no engine may write: an unknown state and
// any change of a finished incident's state. It stores any other move the
// engine decided, backwards ones included: the engine's table is the rule.
func TestJournalStoresWhatTheEngineDecided(t *testing.T) {
	ctx := context.Background()
	j, _ := openTestJournal(t)
	for _, s := range States() {
		if !s.Valid() {
			t.Errorf("States() lists invalid %q", s)
		}
	}
	for _, from := range States() {
		for _, to := range append(States(), State("bogus")) {
			if from == to {
				continue
			}
			inc, err := j.OpenIncident(ctx, Incident{Store: "/s", Kind: KindReplaced, State: StatePinned})
			if err != nil {
				t.Fatal(err)
			}
			if err := j.Transition(ctx, inc.ID, from, Step{Name: "setup"}); err != nil && from != StatePinned {
				t.Fatalf("→ %s: %v", from, err)
			}
			err = j.Transition(ctx, inc.ID, to, Step{Name: "move"})
			refuse := from.Terminal() || !to.Valid()
			if refuse != errors.Is(err, ErrInvalidTransition) || (!refuse && err != nil) {
				t.Errorf("%s → %s = %v, want refused %v", from, to, err, refuse)
			}
			got, _ := j.GetIncident(ctx, inc.ID)
			if want := map[bool]State{true: from, false: to}[refuse]; got.State != want {
				t.Errorf("%s → %s left the incident %s, want %s", from, to, got.State, want)
			}
		}
	}
}

func TestNeedsActionKeepsPrevState(t *testing.T) {
	ctx := context.Background()
	j, _ := openTestJournal(t)
	inc, err := j.OpenIncident(ctx, Incident{Store: "/s", Kind: KindSidecarLost, State: StatePinned},
		Step{Name: StepDetected}, Step{Name: StepFrozen}, Step{Name: StepPinned})
	if err != nil {
		t.Fatal(err)
	}
	steps, _ := j.Steps(ctx, inc.ID)
	if len(steps) != 3 || steps[2].To != StatePinned || steps[0].To != "" {
		t.Fatalf("opening steps: %+v", steps)
	}
	// A restarted worker redoing the pin is a no-op.
	if err := j.Transition(ctx, inc.ID, StatePinned, Step{Name: StepPinned}); err != nil {
		t.Errorf("repeat of the opening transition: %v", err)
	}
	if err := j.Transition(ctx, inc.ID, StateNeedsAction, Step{Name: StepCaptureFailed, Detail: map[string]any{"error": "no space left on device"}}); err != nil {
		t.Fatal(err)
	}
	if err := j.Transition(ctx, inc.ID, StateCaptured, Step{Name: StepCaptureWritten}); err != nil {
		t.Errorf("needs_action → captured: %v", err)
	}
	got, _ := j.GetIncident(ctx, inc.ID)
	if got.State != StateCaptured || got.PrevState != StateNeedsAction {
		t.Errorf("state %s prev %s", got.State, got.PrevState)
	}
}

func TestUpdateIncident(t *testing.T) {
	ctx := context.Background()
	j, _ := openTestJournal(t)
	inc, err := j.OpenIncident(ctx, Incident{Store: "/s", Kind: KindReplaced, State: StateReleased})
	if err != nil {
		t.Fatal(err)
	}
	replaced := time.Date(2026, 11, 29, 23, 15, 0, 123456789, time.UTC)
	got, err := j.UpdateIncident(ctx, inc.ID, Step{Name: StepCaptureWritten, Detail: map[string]any{"bytes": int64(1 << 40)}}, func(i *Incident) error {
		i.State = StateCaptured
		i.Detail.CapturePath = "/h/state.db.retired-wal-x-1"
		i.Detail.ReplacedAt = replaced
		i.Detail.NewGeneration = &GenerationRecord{Main: FileRecord{ID: fileid.ID{Dev: 1, Ino: 1 << 60}}}
		i.Store = "/elsewhere" // ignored
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateCaptured || got.Store != "/s" {
		t.Errorf("UpdateIncident returned %+v", got)
	}
	stored, _ := j.GetIncident(ctx, inc.ID)
	if stored.Detail.CapturePath != "/h/state.db.retired-wal-x-1" || !stored.Detail.ReplacedAt.Equal(replaced) ||
		stored.Detail.NewGeneration.Main.Ino != 1<<60 || stored.Store != "/s" {
		t.Errorf("stored incident %+v", stored)
	}
	steps, _ := j.Steps(ctx, inc.ID)
	last := steps[len(steps)-1]
	if last.Name != StepCaptureWritten || last.From != StateReleased || last.To != StateCaptured {
		t.Errorf("last step %+v", last)
	}
	if n, ok := last.Detail["bytes"].(json.Number); !ok || n.String() != "1099511627776" {
		t.Errorf("step detail bytes = %#v", last.Detail["bytes"])
	}

	// An error from fn or a refused transition changes nothing.
	boom := errors.New("boom")
	if _, err := j.UpdateIncident(ctx, inc.ID, Step{Name: "note"}, func(i *Incident) error {
		i.Detail.Error = "x"
		return boom
	}); !errors.Is(err, boom) {
		t.Errorf("UpdateIncident error = %v", err)
	}
	if _, err := j.UpdateIncident(ctx, inc.ID, Step{Name: "note"}, func(i *Incident) error {
		i.State = State("bogus")
		return nil
	}); !errors.Is(err, ErrInvalidTransition) {
		t.Errorf("UpdateIncident to an unknown state = %v", err)
	}
	if after, _ := j.Steps(ctx, inc.ID); len(after) != len(steps) {
		t.Errorf("failed updates added steps")
	}
	if s, _ := j.GetIncident(ctx, inc.ID); s.Detail.Error != "" || s.State != StateCaptured {
		t.Errorf("failed updates changed the incident: %+v", s)
	}
}

func TestIncidentValidation(t *testing.T) {
	ctx := context.Background()
	j, _ := openTestJournal(t)
	bad := []Incident{
		{Kind: KindReplaced},
		{Store: "/s", Kind: "exploded"},
		{Store: "/s", Kind: KindReplaced, State: StateResolved},
		{Store: "/s", Kind: KindReplaced, ID: "../../etc"},
	}
	for _, inc := range bad {
		if _, err := j.OpenIncident(ctx, inc); err == nil {
			t.Errorf("OpenIncident(%+v) accepted", inc)
		}
	}
	inc, err := j.OpenIncident(ctx, Incident{Store: "/s", Kind: KindMispaired, ID: "fixed-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.OpenIncident(ctx, Incident{Store: "/s", Kind: KindMispaired, ID: "fixed-1"}); err == nil {
		t.Error("duplicate incident id accepted")
	}
	if _, err := j.AddStep(ctx, inc.ID, Step{Name: "Bad Name"}); err == nil {
		t.Error("bad step name accepted")
	}
	if _, err := j.AddStep(ctx, "nope", Step{Name: "note"}); !errors.Is(err, ErrIncidentNotFound) {
		t.Errorf("AddStep on unknown incident = %v", err)
	}
	if _, err := j.GetIncident(ctx, "nope"); !errors.Is(err, ErrIncidentNotFound) {
		t.Errorf("GetIncident(nope) = %v", err)
	}
	if err := j.Transition(ctx, "nope", StateFrozen, Step{Name: StepFrozen}); !errors.Is(err, ErrIncidentNotFound) {
		t.Errorf("Transition(nope) = %v", err)
	}
}

func TestListIncidents(t *testing.T) {
	ctx := context.Background()
	j, _ := openTestJournal(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	for i, store := range []string{"/a", "/b", "/a"} {
		inc, err := j.OpenIncident(ctx, Incident{Store: store, Kind: KindReplaced, OpenedAt: t0.Add(time.Duration(i) * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, inc.ID)
	}
	if err := j.Transition(ctx, ids[0], StateFailed, Step{Name: StepFailed}); err != nil {
		t.Fatal(err)
	}
	check := func(opt ListOptions, want ...string) {
		t.Helper()
		got, err := j.ListIncidents(ctx, opt)
		if err != nil {
			t.Fatal(err)
		}
		var gotIDs []string
		for _, g := range got {
			gotIDs = append(gotIDs, g.ID)
		}
		if fmt.Sprint(gotIDs) != fmt.Sprint(want) {
			t.Errorf("ListIncidents(%+v) = %v, want %v", opt, gotIDs, want)
		}
	}
	check(ListOptions{}, ids...)
	check(ListOptions{Store: "/a"}, ids[0], ids[2])
	check(ListOptions{OpenOnly: true}, ids[1], ids[2])
	check(ListOptions{OpenOnly: true, Store: "/a"}, ids[2])
	un, err := j.Unfinished(ctx)
	if err != nil || len(un) != 2 || un[0].ID != ids[1] {
		t.Errorf("Unfinished = %+v (%v)", un, err)
	}
}

// One goroutine per store worker, all writing at once.
func TestJournalConcurrentWorkers(t *testing.T) {
	ctx := context.Background()
	j, _ := openTestJournal(t)
	const workers, stepsEach = 8, 40
	ids := make([]string, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inc, err := j.OpenIncident(ctx, Incident{Store: fmt.Sprintf("/store/%d", w), Kind: KindSidecarLost})
			if err != nil {
				errs <- err
				return
			}
			ids[w] = inc.ID
			for i := range stepsEach {
				if _, err := j.AddStep(ctx, inc.ID, Step{Name: "note", Detail: map[string]any{"i": i}}); err != nil {
					errs <- err
					return
				}
				if i == stepsEach/2 {
					if err := j.Transition(ctx, inc.ID, StateFrozen, Step{Name: StepFrozen}); err != nil {
						errs <- err
						return
					}
				}
				if _, err := j.ListIncidents(ctx, ListOptions{OpenOnly: true}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, id := range ids {
		steps, err := j.Steps(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(steps) != stepsEach+2 {
			t.Errorf("incident %s has %d steps, want %d", id, len(steps), stepsEach+2)
		}
		for i, s := range steps {
			if s.Seq != int64(i+1) {
				t.Errorf("incident %s step %d has seq %d", id, i, s.Seq)
			}
		}
	}
}
