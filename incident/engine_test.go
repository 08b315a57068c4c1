package incident

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// scenario is one way an incident goes: how it is set up and opened, and
// what must be true at the end.
type scenario struct {
	name  string
	kind  store.Kind // the zero value is Hermes
	run   func(r *rig) string
	want  journal.State
	check func(t *testing.T, r *rig, inc journal.Incident)
}

func wantSignals(t *testing.T, r *rig, want ...string) {
	t.Helper()
	if got := r.procs.sent(); !slices.Equal(got, want) {
		t.Fatalf("signals %q, want %q", got, want)
	}
}

func wantError(t *testing.T, inc journal.Incident, sub string) {
	t.Helper()
	if !strings.Contains(inc.Detail.Error, sub) {
		t.Fatalf("incident %s error %q, want it to say %q", inc.ID, inc.Detail.Error, sub)
	}
}

var scenarios = []scenario{
	{name: "kill a frozen writer", want: resolved, run: func(r *rig) string {
		return r.open(journal.KindReplaced, PolicyKill, r.writer(101, true, false))
	}, check: func(t *testing.T, r *rig, inc journal.Incident) {
		wantSignals(t, r, "kill 101")
		if len(r.salv.captures) != 1 || inc.Detail.CapturePath != r.salv.captures[0] {
			t.Fatalf("captures %v, capture path %q: want the one taken before release", r.salv.captures, inc.Detail.CapturePath)
		}
	}},
	{name: "observe never signals", want: resolved, run: func(r *rig) string {
		w := r.writer(102, false, false)
		id := r.open(journal.KindReplaced, PolicyObserve, w)
		r.eng.Advance()
		if inc := r.incident(id); inc.State != released {
			r.t.Fatalf("observed incident %s before the writer exits, want released", inc.State)
		}
		r.procs.exit(102)
		return id
	}, check: func(t *testing.T, r *rig, _ journal.Incident) { wantSignals(t, r) }},
	{name: "terminate, then kill after the grace", want: resolved, run: func(r *rig) string {
		r.pol.Grace = time.Minute
		id := r.open(journal.KindReplaced, PolicyTerminate, r.writer(103, true, false))
		r.eng.Advance()
		if inc := r.incident(id); inc.State != released || !r.procs.Alive(holders.ProcRef{Pid: 103, StartTicks: 721}) {
			r.t.Fatalf("within the grace: %s", inc.State)
		}
		return id
	}, check: func(t *testing.T, r *rig, _ journal.Incident) { wantSignals(t, r, "term 103", "thaw 103", "kill 103") }},
	{name: "resume thaws", want: resolved, run: func(r *rig) string {
		id := r.open(journal.KindReplaced, PolicyResume, r.writer(104, true, false))
		r.procs.exit(104)
		return id
	}, check: func(t *testing.T, r *rig, _ journal.Incident) { wantSignals(t, r, "thaw 104") }},
	{name: "hold waits for the operator", want: resolved, run: func(r *rig) string {
		id := r.open(journal.KindReplaced, PolicyHold, r.writer(105, true, false))
		for range 3 {
			r.now = r.now.Add(time.Hour)
			r.eng.Advance()
		}
		if inc := r.incident(id); inc.State != pinned || len(r.procs.sent()) > 0 {
			r.t.Fatalf("held incident %s, signals %v", inc.State, r.procs.sent())
		}
		if err := r.eng.Release(id, PolicyKill); err != nil {
			r.t.Fatal(err)
		}
		return id
	}, check: func(t *testing.T, r *rig, _ journal.Incident) { wantSignals(t, r, "kill 105") }},
	{name: "holder exits before it is pinned", want: failed, run: func(r *rig) string {
		w := r.writer(106, true, false)
		for _, f := range w.files {
			r.procs.pinErr[f.ID] = holders.ErrProcessGone // it exited between the scan and the pin
		}
		return r.open(journal.KindReplaced, PolicyKill, w)
	}, check: func(t *testing.T, r *rig, inc journal.Incident) { wantError(t, inc, "nothing pinned") }},
	{name: "holder gone before the incident opens", want: failed, run: func(r *rig) string {
		w := r.writer(117, false, false)
		r.procs.exit(117)
		return r.open(journal.KindReplaced, PolicyKill, w)
	}},
	{name: "nothing pinnable, observed", want: failed, run: func(r *rig) string {
		w := r.writer(107, false, false)
		for _, f := range w.files {
			r.procs.pinErr[f.ID] = os.ErrPermission
		}
		id := r.open(journal.KindReplaced, PolicyObserve, w)
		r.procs.exit(107)
		return id
	}},
	{name: "disk full before release keeps the holder frozen", want: resolved, run: func(r *rig) string {
		r.salv.failCapture = 2
		id := r.open(journal.KindReplaced, PolicyKill, r.writer(108, true, false))
		r.eng.Advance() // the retry is not due yet
		if inc := r.incident(id); inc.State != needsAction || len(r.procs.sent()) > 0 {
			r.t.Fatalf("capture failing: %s, signals %v", inc.State, r.procs.sent())
		}
		return id
	}, check: func(t *testing.T, r *rig, _ journal.Incident) { wantSignals(t, r, "kill 108") }},
	{name: "disk full: a resolved incident's capture makes room", want: resolved, run: func(r *rig) string {
		first := r.open(journal.KindReplaced, PolicyKill, r.writer(118, true, false))
		if inc := r.settle(first); inc.State != resolved || inc.Detail.CapturePath == "" {
			r.t.Fatalf("first incident: %s, capture %q", inc.State, inc.Detail.CapturePath)
		}
		r.salv.failCapture = 1 // the next capture does not fit until room is made
		id := r.open(journal.KindReplaced, PolicyKill, r.writer(119, true, false))
		if inc := r.incident(id); inc.State == needsAction {
			r.t.Fatalf("the capture waits for space although a resolved incident's capture could be removed")
		}
		return id
	}, check: func(t *testing.T, r *rig, inc journal.Incident) {
		if len(r.salv.removed) != 1 || r.salv.removed[0] != r.salv.captures[0] {
			t.Fatalf("removed %v, want the first incident's capture %s only", r.salv.removed, r.salv.captures[0])
		}
		var first journal.Incident
		for _, i := range r.incidents() {
			if i.ID != inc.ID {
				first = i
			}
		}
		if first.Detail.CapturePath != "" || !r.hasStep(first.ID, journal.StepCapturePruned) {
			t.Fatalf("the pruned incident still names capture %q, or has no %s step", first.Detail.CapturePath, journal.StepCapturePruned)
		}
	}},
	{name: "final capture fails, then succeeds", want: resolved, run: func(r *rig) string {
		r.pol.Grace = time.Hour
		w := r.writer(109, true, false)
		id := r.open(journal.KindReplaced, PolicyTerminate, w)
		// The writer committed once more before it exited: the capture
		// taken before release is stale.
		if err := os.WriteFile(r.procs.paths[w.files[1].ID], []byte("wal, one more frame"), 0o600); err != nil {
			r.t.Fatal(err)
		}
		r.salv.failCapture = 1
		r.procs.exit(109)
		return id
	}, check: func(t *testing.T, r *rig, inc journal.Incident) {
		if len(r.salv.captures) != 2 || inc.Detail.CapturePath != r.salv.captures[1] {
			t.Fatalf("captures %v, used %q: want the final one", r.salv.captures, inc.Detail.CapturePath)
		}
	}},
	{name: "divert fails once", want: resolved, run: func(r *rig) string {
		r.salv.failDivert = 1
		return r.open(journal.KindReplaced, PolicyKill, r.writer(110, true, false))
	}},
	{name: "divert keeps failing", want: unrecoverable, run: func(r *rig) string {
		r.salv.failDivert = maxDivertFails
		return r.open(journal.KindReplaced, PolicyKill, r.writer(111, true, false))
	}, check: func(t *testing.T, r *rig, inc journal.Incident) {
		wantError(t, inc, fmt.Sprintf("divert failed %d times", maxDivertFails))
		wantError(t, inc, "raw files are kept in "+inc.Detail.CapturePath)
	}},
	{name: "WAL fits no main: salvaged from its page images", want: resolved, run: func(r *rig) string {
		r.salv.unpaired = true
		return r.open(journal.KindRewritten, PolicyKill, r.writer(113, true, false))
	}, check: func(t *testing.T, r *rig, inc journal.Incident) {
		sv := inc.Detail.Salvage
		if sv == nil || sv.Messages != 3 || sv.LostMessages != 1 || sv.RawFiles != inc.Detail.CapturePath {
			t.Fatalf("salvage record %+v, capture %s", sv, inc.Detail.CapturePath)
		}
	}},
	{name: "WAL fits no main, page images unreadable", want: unrecoverable, run: func(r *rig) string {
		r.salv.unpaired, r.salv.failSalvage = true, true
		return r.open(journal.KindSidecarLost, PolicyKill, r.writer(114, false, true))
	}, check: func(t *testing.T, r *rig, inc journal.Incident) {
		wantError(t, inc, "page images could not be read")
		wantError(t, inc, "raw files are kept in")
		if len(r.salv.captures) == 0 {
			t.Fatal("no capture was written")
		}
	}},
	{name: "replay job fails", want: failed, run: func(r *rig) string {
		id := r.open(journal.KindReplaced, PolicyKill, r.writer(112, true, false))
		if n := r.runJobs(true); n != 1 {
			r.t.Fatalf("%d jobs ran", n)
		}
		return id
	}, check: func(t *testing.T, r *rig, inc journal.Incident) { wantError(t, inc, "replay job") }},
	{name: "generic store ends at the capture", kind: store.Generic, want: resolved, run: func(r *rig) string {
		return r.open(journal.KindReplaced, PolicyKill, r.writer(113, true, false))
	}, check: func(t *testing.T, r *rig, inc journal.Incident) {
		if jobs, _ := r.j.ListJobs(context.Background(), journal.JobFilter{IncidentID: inc.ID}); len(jobs) > 0 {
			t.Fatalf("generic store got replay jobs %+v", jobs)
		}
	}},
	{name: "disk full: the sidecar_lost snapshot gets room from a resolved incident's capture", want: resolved, run: func(r *rig) string {
		first := r.open(journal.KindReplaced, PolicyKill, r.writer(120, true, false))
		if inc := r.settle(first); inc.State != resolved || inc.Detail.CapturePath == "" {
			r.t.Fatalf("first incident: %s, capture %q", inc.State, inc.Detail.CapturePath)
		}
		r.salv.failSnap = 1 // the snapshot does not fit until room is made
		id := r.open(journal.KindSidecarLost, PolicyKill, r.writer(121, true, false))
		if inc := r.incident(id); inc.State == needsAction {
			r.t.Fatalf("the snapshot waits for space although a resolved incident's capture could be removed")
		}
		return id
	}, check: func(t *testing.T, r *rig, inc journal.Incident) {
		if len(r.salv.removed) != 1 || r.salv.removed[0] != r.salv.captures[0] {
			t.Fatalf("removed %v, want the first incident's capture %s only", r.salv.removed, r.salv.captures[0])
		}
	}},
	{name: "sidecar_lost snapshot, retried", want: resolved, run: func(r *rig) string {
		r.salv.failSnap = 1
		return r.open(journal.KindSidecarLost, PolicyKill, r.writer(114, true, false))
	}},
	{name: "mispaired quarantine", want: resolved, run: func(r *rig) string {
		return r.open(journal.KindMispaired, PolicyKill, r.writer(115, true, false))
	}, check: func(t *testing.T, r *rig, inc journal.Incident) {
		if len(inc.Detail.Quarantined) != 2 {
			t.Fatalf("quarantined %v", inc.Detail.Quarantined)
		}
	}},
	{name: "an unlinked -wal nobody holds", want: resolved, run: func(r *rig) string {
		w := r.writer(116, false, false)
		var pins []Pin
		for _, f := range w.files {
			fd, err := os.Open(r.procs.paths[f.ID])
			if err != nil {
				r.t.Fatal(err)
			}
			pins = append(pins, Pin{Role: f.Role, ID: f.ID, File: fd})
		}
		r.procs.exit(116)
		r.eng.Open(Opening{Kind: journal.KindSidecarLost, Policy: PolicyObserve, At: r.now, Pins: pins})
		return r.eng.IDs()[0]
	}, check: func(t *testing.T, r *rig, inc journal.Incident) {
		if inc.Policy != "none" || len(r.procs.sent()) > 0 {
			t.Fatalf("policy %q, signals %v", inc.Policy, r.procs.sent())
		}
	}},
	{name: "rewritten: the rewriter finishes, then the writers are killed", want: resolved, run: func(r *rig) string {
		w := r.writer(117, true, false)
		for i := range w.files {
			w.files[i].Current = true // same inodes: the main was rewritten in place
		}
		r.procs.writing[900] = true
		r.salv.unpaired = true
		o := Opening{Kind: journal.KindRewritten, Policy: PolicyKill, At: r.now, Frozen: map[int]time.Time{117: r.now},
			Orphans:  []holders.Process{{Pid: 117, StartTicks: w.ref.StartTicks, Exe: "/usr/bin/writer", Files: w.files}},
			Rewriter: &holders.Process{Pid: 900, StartTicks: 9, Exe: "/usr/bin/cp"}, RewriteConfirmed: true}
		r.eng.Open(o)
		id := r.eng.IDs()[0]
		r.eng.Advance()
		if inc := r.incident(id); inc.State != pinned || len(r.procs.sent()) > 0 || inc.Detail.Quarantined != nil {
			r.t.Fatalf("while cp writes: %s, signals %v, quarantined %v; want pinned, nothing signalled or moved",
				inc.State, r.procs.sent(), inc.Detail.Quarantined)
		}
		r.procs.mu.Lock()
		r.procs.writing[900] = false
		r.procs.mu.Unlock()
		return id
	}, check: func(t *testing.T, r *rig, inc journal.Incident) {
		wantSignals(t, r, "kill 117")
		if len(inc.Detail.Quarantined) != 2 || inc.Detail.Rewriter == nil || inc.Detail.Rewriter.PID != 900 || inc.Detail.Salvage == nil {
			t.Fatalf("quarantined %v, rewriter %+v, salvage %+v", inc.Detail.Quarantined, inc.Detail.Rewriter, inc.Detail.Salvage)
		}
	}},
	{name: "read-only holders are pinned, never signalled", want: resolved, run: func(r *rig) string {
		id := r.open(journal.KindReplaced, PolicyKill, r.reader(118), r.reader(119))
		r.eng.Advance()
		if inc := r.incident(id); inc.State.Rank() < captured.Rank() {
			r.t.Fatalf("an incident with only running readers is %s; it must not wait for them", inc.State)
		}
		return id
	}, check: func(t *testing.T, r *rig, inc journal.Incident) {
		wantSignals(t, r)
		if inc.Policy != "none" || len(inc.Detail.Holders) != 2 || !inc.Detail.Holders[0].ReadOnly {
			t.Fatalf("policy %q holders %+v: want none, both recorded read-only", inc.Policy, inc.Detail.Holders)
		}
		if !r.procs.Alive(holders.ProcRef{Pid: 118, StartTicks: 118 * 7}) {
			t.Fatal("a read-only holder is gone")
		}
	}},
	{name: "a writer and a reader: only the writer is killed", want: resolved, run: func(r *rig) string {
		return r.open(journal.KindReplaced, PolicyKill, r.writer(120, true, false), r.reader(121))
	}, check: func(t *testing.T, r *rig, inc journal.Incident) {
		wantSignals(t, r, "kill 120")
		if h := inc.Detail.Holders[1]; !h.ReadOnly || h.Released != "" {
			t.Fatalf("reader recorded %+v", h)
		}
	}},
	{name: "foreign sidecars nobody holds", want: resolved, run: func(r *rig) string {
		r.eng.Open(Opening{Kind: journal.KindMispaired, Policy: PolicyObserve, At: r.now,
			Quarantine: map[string]fileid.ID{"-wal": {Dev: 1, Ino: 5}}})
		return r.eng.IDs()[0]
	}},
	{name: "mispaired, nothing pinnable, disk full before release", want: resolved, run: func(r *rig) string {
		// The quarantined sidecars are all there is to capture while
		// the holder stays frozen: its capture failing needs action
		// from frozen, the state it was never pinned out of.
		w := r.writer(130, true, false)
		for _, f := range w.files {
			r.procs.pinErr[f.ID] = holders.ErrProcessGone
		}
		r.salv.failCapture = 1
		id := r.open(journal.KindMispaired, PolicyKill, w)
		if inc := r.incident(id); inc.State != needsAction || len(r.procs.sent()) > 0 {
			r.t.Fatalf("with the capture before release failing: %s, signals %v; want needs_action, the holder frozen", inc.State, r.procs.sent())
		}
		return id
	}, check: func(t *testing.T, r *rig, inc journal.Incident) { wantSignals(t, r, "kill 130") }},
}

func TestMachine(t *testing.T) {
	seen := map[[2]journal.State]bool{}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			r := newRig(t, sc.kind)
			id := sc.run(r)
			inc := r.settle(id)
			if inc.State != sc.want {
				t.Fatalf("incident ended %s (%s), want %s", inc.State, inc.Detail.Error, sc.want)
			}
			if sc.check != nil {
				sc.check(t, r, inc)
			}
			for _, tr := range r.transitions(id) {
				if tr[0] == "" {
					continue // opened
				}
				if !r.eng.allowed(tr[0], tr[1]) {
					t.Errorf("journal shows %s → %s, which the table does not have", tr[0], tr[1])
				}
				seen[tr] = true
			}
			if left := r.procs.stopped(); len(left) > 0 {
				t.Errorf("processes left stopped: %v", left)
			}
		})
	}
	for _, tr := range resumeTransitions(t) {
		seen[tr] = true
	}
	for from, ent := range newTable() {
		for _, to := range ent.next {
			if !seen[[2]journal.State{from, to}] {
				t.Errorf("no scenario takes %s → %s", from, to)
			}
		}
	}
}
