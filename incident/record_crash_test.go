package incident

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// The crash tests of the one record: for each field a live incident holds
// between two steps, an agent stops with the field set, a new agent
// resumes from the journal, and the field still decides what happens.

// crashAt makes the rig's next engine stop dead before the first step of
// state s, and starts it.
func (r *rig) crashAt(s journal.State) {
	r.hooks = Hooks{BeforeStep: func(_ string, at journal.State) {
		if at == s {
			panic(crash{"step " + string(s)})
		}
	}}
	r.start()
}

// realWAL gives p's orphan -wal and -shm the bytes of a real WAL with
// committed frames and its wal-index, so a cut can be read at the pins.
func (r *rig) realWAL(p *fakeProc) {
	r.t.Helper()
	db := filepath.Join(r.t.TempDir(), "src.db")
	c := hermestest.OpenNoCheckpoint(r.t, db)
	for _, q := range []string{"CREATE TABLE t (x)", "INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (2)"} {
		if _, err := c.Exec(q); err != nil {
			r.t.Fatal(err)
		}
	}
	for _, f := range p.files {
		if f.Role != holders.RoleMain {
			b, err := os.ReadFile(db + f.Role.Suffix())
			if err != nil {
				r.t.Fatal(err)
			}
			if err := os.WriteFile(r.procs.paths[f.ID], b, 0o600); err != nil {
				r.t.Fatal(err)
			}
		}
	}
}

// openWith opens an incident as the running agent's detection does: it
// saw the change, so it knows the old generation.
func (r *rig) openWith(o Opening, ps ...*fakeProc) string {
	r.t.Helper()
	o.At, o.Frozen, o.Old = r.now, map[int]time.Time{}, &journal.GenerationRecord{}
	for _, p := range ps {
		o.Orphans = append(o.Orphans, holders.Process{Pid: p.ref.Pid, StartTicks: p.ref.StartTicks, Exe: "/usr/bin/writer", Files: p.files})
		if p.state == 'T' {
			o.Frozen[p.ref.Pid] = r.now
		}
	}
	var id string
	survive(func() { r.eng.Open(o) })
	for _, inc := range r.incidents() {
		id = inc.ID
	}
	if id == "" {
		r.t.Fatal("no incident opened")
	}
	return id
}

// Bystanders: a rewritten store's other connections of the old
// generation hold its current sidecars and are left running. After a
// restart they are still no new opener: the quarantine does not wait for
// them, nor leave the sidecars in place for them.
func TestResumeKeepsBystanders(t *testing.T) {
	r := newRig(t, store.Hermes)
	w := r.writer(201, true, false)
	by := r.writer(202, false, false) // holds the current -wal/-shm, running
	rw := r.writer(203, false, false)
	r.procs.writing[203] = true
	rwp := holders.Process{Pid: rw.ref.Pid, StartTicks: rw.ref.StartTicks}
	id := r.openWith(Opening{Kind: journal.KindRewritten, Policy: PolicyKill, Rewriter: &rwp,
		Bystanders: []holders.ProcRef{by.ref}}, w)
	r.eng.Advance()
	if li := r.liveOf(id); li == nil || li.wait.why != WaitRewriter {
		t.Fatalf("want the incident waiting for its rewriter before the restart")
	}
	r.restart()
	r.procs.writing[203] = false
	r.procs.exit(203)
	inc := r.settle(id)
	if len(inc.Detail.Quarantined) != 2 || noted(t, r, id, "check the store by hand") {
		t.Fatalf("after a restart the bystander counted as a new opener: quarantined %v (%s)", inc.Detail.Quarantined, inc.State)
	}
}

// Quarantine: a mispaired store nobody holds names the foreign sidecars
// to move aside. An agent that stops before the quarantine leaves them
// at the path; the next one must still quarantine them, not fail the
// incident as "every holder exited" and leave them for the next opener.
func TestResumeKeepsQuarantineList(t *testing.T) {
	r := newRig(t, store.Hermes)
	r.crashAt(open)
	id := r.openWith(Opening{Kind: journal.KindMispaired, Policy: PolicyObserve,
		Quarantine: map[string]fileid.ID{"-wal": {Dev: 1, Ino: 7001}, "-shm": {Dev: 1, Ino: 7002}}})
	if inc := r.incident(id); inc.State != open || len(inc.Detail.Quarantined) != 0 {
		t.Fatalf("before the restart: %s, quarantined %v", inc.State, inc.Detail.Quarantined)
	}
	r.restart()
	inc := r.settle(id)
	if inc.State != resolved || len(inc.Detail.Quarantined) != 2 {
		t.Fatalf("resumed: %s (%s), quarantined %v; want the sidecars quarantined and resolved", inc.State, inc.Detail.Error, inc.Detail.Quarantined)
	}
}

// CutWanted: the agent saw a replacement but the detection read no cut;
// it is read at the pins. An agent that stops before pinning leaves that
// to the next one, which must read it too, not fall back to timestamps.
func TestResumeKeepsCutWanted(t *testing.T) {
	r := newRig(t, store.Hermes)
	w := r.writer(301, true, false)
	r.realWAL(w)
	r.crashAt(frozen)
	id := r.openWith(Opening{Kind: journal.KindReplaced, Policy: PolicyKill}, w)
	if inc := r.incident(id); inc.State != frozen || inc.Detail.WALCut != nil {
		t.Fatalf("before the restart: %s, cut %+v", inc.State, inc.Detail.WALCut)
	}
	r.restart()
	inc := r.settle(id)
	if inc.Detail.WALCut == nil || inc.Detail.WALCut.Source != "pin" || inc.Detail.WALCut.Frame == 0 {
		t.Fatalf("resumed: cut %+v; want the cut read at the pins", inc.Detail.WALCut)
	}
}

// CutLate: a rewritten main whose writers were frozen only after the
// rewrite's first write gets a cut that keeps the timestamp margin. Read
// at the pins by a resumed agent, it must keep it as well.
func TestResumeKeepsCutLate(t *testing.T) {
	r := newRig(t, store.Hermes)
	w := r.writer(401, true, false)
	r.realWAL(w)
	r.crashAt(frozen)
	o := Opening{Kind: journal.KindRewritten, Policy: PolicyKill}
	o.At = r.now
	id := r.openWithLateFreeze(o, w)
	r.restart()
	inc := r.settle(id)
	c := inc.Detail.WALCut
	if c == nil {
		t.Fatal("resumed: no cut read at the pins")
	}
	if want := inc.Detail.ReplacedAt.Add(-replaceMargin); !c.At.Equal(want) {
		t.Fatalf("resumed: cut at %v, want %v (the change less the margin: the writers were frozen after it)", c.At, want)
	}
}

// openWithLateFreeze is openWith for writers stopped after the change.
func (r *rig) openWithLateFreeze(o Opening, ps ...*fakeProc) string {
	r.t.Helper()
	o.Old = &journal.GenerationRecord{}
	o.Frozen = map[int]time.Time{}
	for _, p := range ps {
		o.Orphans = append(o.Orphans, holders.Process{Pid: p.ref.Pid, StartTicks: p.ref.StartTicks, Exe: "/usr/bin/writer", Files: p.files})
		o.Frozen[p.ref.Pid] = o.At.Add(time.Second)
	}
	survive(func() { r.eng.Open(o) })
	incs := r.incidents()
	if len(incs) == 0 {
		r.t.Fatal("no incident opened")
	}
	return incs[len(incs)-1].ID
}

// Tries: a divert that keeps failing gives up after maxDivertFails tries
// in all, however often the agent restarts meanwhile; before, each
// restart began the count again, and a store whose agent restarted often
// enough held its replays back for good.
func TestResumeKeepsDivertTries(t *testing.T) {
	r := newRig(t, store.Hermes)
	r.salv.failDivert = 100
	w := r.writer(501, true, true)
	id := r.open(journal.KindReplaced, PolicyKill, w)
	for r.salv.divertCount() < 3 {
		r.now = r.now.Add(time.Minute)
		r.eng.Advance()
		r.drain()
	}
	if inc := r.incident(id); inc.State != captured {
		t.Fatalf("before the restart: %s (%s)", inc.State, inc.Detail.Error)
	}
	r.restart()
	inc := r.settle(id)
	if n := r.salv.divertCount(); inc.State != unrecoverable || n != maxDivertFails {
		t.Fatalf("resumed: %s after %d diverts in all, want unrecoverable after %d", inc.State, n, maxDivertFails)
	}
}

func (s *fakeSalvage) divertCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.diverts)
}

// liveOf is the engine's live incident id, nil when none.
func (r *rig) liveOf(id string) *live {
	r.eng.mu.Lock()
	defer r.eng.mu.Unlock()
	return r.eng.live[id]
}

// A capture taken before release whose own record failed is journaled
// by the next step the journal takes (the release): an agent that then
// dies, its holders killed, resumes from that capture instead of failing
// the incident with the copy on disk.
func TestResumeKeepsACaptureWhoseRecordFailed(t *testing.T) {
	r := newRig(t, store.Hermes)
	failing := false
	r.hooks = Hooks{
		BeforeJournal: func(_ string, _, _ journal.State, step string) {
			if on := step == journal.StepCaptureWritten; on != failing {
				r.failJournalWrites(on)
				failing = on
			}
		},
		// After the release's record, before the final capture.
		BeforeStep: func(_ string, s journal.State) {
			if s == released {
				panic(crash{"step released"})
			}
		},
	}
	r.start()
	w := r.writer(601, true, false)
	id := r.openWith(Opening{Kind: journal.KindReplaced, Policy: PolicyKill}, w)
	inc, err := r.j.GetIncident(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if inc.State != released || inc.Detail.CapturePath == "" {
		t.Fatalf("before the restart: %s, capture %q; want released with the capture before release journaled", inc.State, inc.Detail.CapturePath)
	}
	r.restart()
	if inc := r.settle(id); inc.State != resolved {
		t.Fatalf("resumed: %s (%s), want resolved from the capture taken before release", inc.State, inc.Detail.Error)
	}
}
