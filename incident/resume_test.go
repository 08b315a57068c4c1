package incident

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// crash is what a test hook panics with to stop an agent dead at a point
// of the protocol.
type crash struct{ point string }

// survive runs f and reports whether it stopped at a crash.
func survive(f func()) (crashed bool) {
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(crash); !ok {
				panic(v)
			}
			crashed = true
		}
	}()
	f()
	return false
}

// restart is a new agent on the same journal: the old engine's fds close
// (a killed process's do), its stopped holders stay stopped, and every
// unfinished incident is resumed.
func (r *rig) restart() {
	r.t.Helper()
	r.eng.Close()
	r.hooks = Hooks{}
	r.start()
	incs, err := r.j.Unfinished(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	for _, inc := range incs {
		r.eng.Resume(inc)
	}
	r.eng.Advance()
}

// outcome is what must be the same however often the agent dies: how the
// incident ends, which replay jobs it made, and what became of its
// holders.
type outcome struct {
	state   journal.State
	jobs    []string
	holders []byte
}

func (r *rig) outcome(id string) outcome {
	r.t.Helper()
	o := outcome{state: r.incident(id).State}
	jobs, err := r.j.ListJobs(context.Background(), journal.JobFilter{IncidentID: id})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, j := range jobs {
		o.jobs = append(o.jobs, filepath.Base(j.Path))
	}
	slices.Sort(o.jobs)
	o.jobs = slices.Compact(o.jobs)
	for _, pid := range []int{301, 302} {
		if p := r.procs.procs[pid]; p != nil {
			o.holders = append(o.holders, p.state)
		}
	}
	return o
}

func (o outcome) String() string {
	return fmt.Sprintf("%s, jobs %v, holders %q", o.state, o.jobs, o.holders)
}

// Kill the agent at every point of the protocol, one run per point:
// before each step of each state, and inside each step after its work but
// before its journal write. A new agent resumes from the journal, and the
// incident ends as it ends without a crash: same state, same replay jobs,
// holders dealt with per policy, none left stopped.
func TestCrashResumeEveryPoint(t *testing.T) {
	for _, c := range []struct {
		kind   journal.Kind
		policy Policy
	}{
		{journal.KindReplaced, PolicyKill},
		{journal.KindReplaced, PolicyTerminate},
		{journal.KindSidecarLost, PolicyKill},
		{journal.KindMispaired, PolicyKill},
	} {
		t.Run(fmt.Sprintf("%s-%s", c.kind, c.policy), func(t *testing.T) {
			setup := func(r *rig) string {
				r.writer(301, true, true)
				r.writer(302, true, true)
				return r.open(c.kind, c.policy, r.procs.procs[301], r.procs.procs[302])
			}
			// The run without a crash counts the points.
			clean := newRig(t, 0)
			var points []string
			clean.hooks = Hooks{
				BeforeStep: func(_ string, s journal.State) { points = append(points, "step "+string(s)) },
				BeforeJournal: func(_ string, from, to journal.State, step string) {
					points = append(points, fmt.Sprintf("write %s %s→%s", step, from, to))
				},
			}
			clean.start()
			want := clean.outcome(clean.settle(setup(clean)).ID)
			if want.state != resolved {
				t.Fatalf("without a crash: %v", want)
			}
			for k := range points {
				r := newRig(t, 0)
				n := 0
				hit := func(p string) {
					if n == k {
						panic(crash{p})
					}
					n++
				}
				r.hooks = Hooks{
					BeforeStep:    func(_ string, s journal.State) { hit("step " + string(s)) },
					BeforeJournal: func(_ string, from, to journal.State, step string) { hit("write " + step) },
				}
				r.start()
				var id string
				if !survive(func() { id = setup(r) }) {
					survive(func() { r.settle(id) })
				}
				if id == "" {
					id = r.eng.IDs()[0]
				}
				r.restart()
				got := r.outcome(r.settle(id).ID)
				if got.String() != want.String() {
					t.Errorf("agent killed at %s: %v, without a crash %v", points[k], got, want)
				}
				if left := r.procs.stopped(); len(left) > 0 {
					t.Errorf("agent killed at %s: processes left stopped %v", points[k], left)
				}
				// A sidecar_lost incident's main snapshot lives next to
				// the store until the capture adopts it: whoever finishes
				// the incident removes it (chaos: one was left after a
				// kill between the pre-release capture and the final one).
				if left, _ := filepath.Glob(r.st.Path + ".snapshot-*"); len(left) > 0 {
					t.Errorf("agent killed at %s: left in the profile directory: %v", points[k], left)
				}
			}
			t.Logf("%d crash points", len(points))
		})
	}
}

// resumeTransitions runs the incidents only a restart can take through
// some transitions (holders that died with the previous agent's pins, a
// divert that fails again after a restart) and returns the transitions
// taken, for TestMachine's account of the table.
func resumeTransitions(t *testing.T) [][2]journal.State {
	var out [][2]journal.State
	for _, c := range []struct {
		name    string
		states  []journal.State // the journal's path before the restart
		capture bool            // a capture was written before the restart
		divert  int             // divert failures after the restart
		want    journal.State
	}{
		{"open, holders gone", []journal.State{open}, false, 0, failed},
		{"frozen, holders gone", []journal.State{frozen}, false, 0, failed},
		{"pinned, holders gone", []journal.State{frozen, pinned}, false, 0, failed},
		{"pinned, holders gone, capture taken", []journal.State{frozen, pinned}, true, 0, resolved},
		{"needs action, holders gone", []journal.State{frozen, pinned, released, needsAction}, false, 0, failed},
		{"diverted, divert fails again", []journal.State{frozen, pinned, released, captured, diverted}, true, maxDivertFails, unrecoverable},
	} {
		t.Run("resume "+c.name, func(t *testing.T) {
			r := newRig(t, 0)
			ctx := context.Background()
			inc, err := r.j.OpenIncident(ctx, journal.Incident{Store: r.st.Path, Kind: journal.KindReplaced, State: c.states[0],
				Policy: string(PolicyKill), Detail: journal.IncidentDetail{Holders: []journal.HolderRecord{{PID: 399, StartTicks: 1, Frozen: true}}}})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range c.states[1:] {
				if _, err := r.j.UpdateIncident(ctx, inc.ID, journal.Step{Name: "test." + string(s)}, func(i *journal.Incident) error {
					i.State = s
					if c.capture {
						i.Detail.CapturePath = r.dir + "/capture-before"
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			r.salv.failDivert = c.divert
			r.restart()
			got := r.settle(inc.ID)
			if got.State != c.want {
				t.Fatalf("resumed incident ended %s (%s), want %s", got.State, got.Detail.Error, c.want)
			}
			for _, tr := range r.transitions(inc.ID)[len(c.states):] {
				if !r.eng.allowed(tr[0], tr[1]) {
					t.Errorf("journal shows %s → %s, which the table does not have", tr[0], tr[1])
				}
				out = append(out, tr)
			}
		})
	}
	return out
}

// An idle store's -wal unlinked with committed frames is an incident with
// no holder, pinned only by the agent's own fds. If the capture cannot be
// written (a full disk) and the agent then dies, nothing holds the -wal
// any more: the resumed incident fails and says what was lost, rather than
// blaming holders that never were (the 1000-cycle chaos run's failed
// sidecar_lost incident).
func TestResumeHolderlessIncidentAfterAgentDied(t *testing.T) {
	r := newRig(t, store.Hermes)
	r.salv.failCapture = 100
	wal := filepath.Join(r.dir, "unlinked-wal")
	if err := os.WriteFile(wal, []byte("frames"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(wal)
	if err != nil {
		t.Fatal(err)
	}
	r.eng.Open(Opening{Kind: journal.KindSidecarLost, Policy: PolicyKill, At: r.now, Frozen: map[int]time.Time{},
		Pins: []Pin{{Role: holders.RoleWAL, ID: fileid.ID{Dev: 1, Ino: 99}, File: f}}})
	ids := r.eng.IDs()
	if len(ids) != 1 {
		t.Fatalf("incidents %v", ids)
	}
	if inc := r.incident(ids[0]); inc.State != journal.StateNeedsAction {
		t.Fatalf("with the disk full: %s (%s), want needs_action", inc.State, inc.Detail.Error)
	}
	r.restart()
	inc := r.incident(ids[0])
	if inc.State != journal.StateFailed || !strings.Contains(inc.Detail.Error, "held only by the previous agent") {
		t.Fatalf("resumed: %s (%q)", inc.State, inc.Detail.Error)
	}
}

// A frozen holder whose capture could not be written (a full disk) is
// still stopped when the agent comes back, but the new agent's scan does
// not tie it to the store: the incident keeps it (pid and start time
// still match), pins its journaled files and finishes, instead of
// failing with "every orphan holder exited" and leaving it stopped.
func TestResumeHolderTheScanDoesNotShow(t *testing.T) {
	r := newRig(t, store.Hermes)
	r.salv.failCapture = 1
	p := r.writer(101, true, true)
	id := r.open(journal.KindSidecarLost, PolicyKill, p)
	if inc := r.incident(id); inc.State != journal.StateNeedsAction {
		t.Fatalf("with the capture failing: %s (%s), want needs_action", inc.State, inc.Detail.Error)
	}
	r.procs.unseen = map[int]bool{101: true}
	r.restart()
	r.now = r.now.Add(time.Hour) // past the capture retry
	r.eng.Advance()
	inc := r.incident(id)
	if inc.State == journal.StateFailed || len(r.procs.stopped()) != 0 {
		t.Fatalf("resumed: %s (%q), stopped %v; want it carried on with the holder", inc.State, inc.Detail.Error, r.procs.stopped())
	}
}
