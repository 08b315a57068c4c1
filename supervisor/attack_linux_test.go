package supervisor

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// Issue 14, row 4: alice makes her ~/.hermes a symlink to a root-owned
// service directory. It is not her home: not watched (no guard, no
// signals, nothing created there), and reported in status.
func TestAttackHomeLinkedToServiceDir(t *testing.T) {
	base := attackBase(t)
	alice := newAttackUser(t, base, "sgsec-r4alice")
	svc := filepath.Join(base, "svc")
	if err := os.Mkdir(svc, 0o755); err != nil {
		t.Fatal(err)
	}
	svcDB := filepath.Join(svc, "state.db")
	if err := hermestest.CreateStore(svcDB); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(alice.hermes); err != nil {
		t.Fatal(err)
	}
	alice.as(t, "ln -s "+svc+" "+alice.hermes)
	passwd := filepath.Join(base, "passwd")
	line := alice.name + ":x:" + itoa(alice.uid) + ":" + itoa(alice.gid) + "::" + alice.home + ":/bin/sh\n"
	if err := os.WriteFile(passwd, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: svcDB, Rate: 200})
	hermestest.WaitAckFile(t, w.AckPath, 5)
	before := snapshotTree(t, svc)

	a := startAgent(t, base, func(o *Options) {
		o.Discover = store.DiscoverOptions{Getenv: func(string) string { return "" }, UserHome: "/nonexistent",
			AllUsers: true, PasswdPath: passwd}
	})
	if a.worker(svcDB) != nil {
		t.Fatalf("root's service store %s is watched as %s's home", svcDB, alice.name)
	}
	st, err := a.Status(httptest.NewRequest("GET", "/v1/status", nil))
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	var found bool
	for _, p := range a.problems {
		found = found || (p.Path == alice.hermes && errors.Is(p, store.ErrUntrustedLink))
	}
	a.mu.Unlock()
	if !found {
		t.Fatalf("the refused link %s is not reported; status: %+v", alice.hermes, st)
	}

	// A restore of the service store is not an incident of alice's: its
	// writer is never stopped, nothing is created in its directory.
	hermestest.RenameFreshOver(t, svcDB)
	a.reconcile()
	if s := hermestest.StateOf(w.Pid); s == 'T' || s == 'Z' || s == 'X' {
		t.Fatalf("root's writer was signalled (state %c)", s)
	}
	if incs, _ := a.journal.ListIncidents(context.Background(), journal.ListOptions{}); len(incs) != 0 {
		t.Fatalf("incidents opened on an unwatched store: %+v", incs)
	}
	delete(before, svcDB+".restore-tmp") // the test's own restore
	checkNothingNew(t, svc, before)
}

// Issue 14, row 3: during her incident alice replaces a pending replay
// file (one of her diverts, or Hermes' own sessions/<id>.jsonl) with a
// symlink to bob's 0600 transcript. Nothing of bob's reaches her store.
func TestAttackReplayFileLinkedToAnotherUsers(t *testing.T) {
	base := attackBase(t)
	alice := newAttackUser(t, base, "sgsec-r3alice")
	bob := newAttackUser(t, base, "sgsec-r3bob")
	secret := filepath.Join(bob.home, "secret.jsonl")
	const marker = "bob-private-line"
	if err := os.WriteFile(secret, []byte(`{"role": "user", "content": "`+marker+`", "timestamp": 1000.5}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	chownTree(t, bob.home, bob.uid, bob.gid)
	pdir := filepath.Dir(alice.store())
	divert := filepath.Join(pdir, "sessions", "recovered", "inc-attack")
	alice.as(t, "mkdir -p "+divert+" && ln -s "+secret+" "+divert+"/s1.jsonl && ln -s "+secret+" "+pdir+"/sessions/s2.jsonl")

	a := startMultiUserAgent(t, nil, alice.hermes, bob.hermes)
	if a.worker(alice.store()) == nil {
		t.Fatalf("alice's store %s not watched", alice.store())
	}
	ctx := context.Background()
	// Her incident is replaying: its jobs are pending. The test writes
	// what the engine would: replaying lets the store's replays run.
	inc, err := a.journal.OpenIncident(ctx, journal.Incident{ID: "inc-attack", Store: alice.store(), Profile: "work",
		Home: alice.hermes, Kind: journal.KindReplaced, State: journal.StateReplaying, LetsReplay: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, p := range []string{filepath.Join(divert, "s1.jsonl"), filepath.Join(pdir, "sessions", "s2.jsonl")} {
		job, err := a.journal.EnqueueJob(ctx, journal.Job{IncidentID: inc.ID, Store: alice.store(), Path: p})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, job.ID)
	}
	for _, id := range ids {
		hermestest.Eventually(t, "the job to be refused", 20*time.Second, func() bool {
			j, err := a.journal.GetJob(ctx, id)
			return err == nil && (j.State == journal.JobFailed || j.State == journal.JobDone)
		})
		j, _ := a.journal.GetJob(ctx, id)
		if j.State != journal.JobFailed || !strings.Contains(j.LastError, recovery.ErrUntrustedInput.Error()) {
			t.Errorf("job %d (%s): %s %q, want refused", id, j.Path, j.State, j.LastError)
		}
	}
	if _, marked := rowsOfSession(t, alice.store(), "s1", marker); marked != 0 {
		t.Fatalf("%d of bob's private lines in alice's store", marked)
	}
}

// Issue 14, row 1: during her own incident (held, so the window is as long
// as the test needs), alice replaces profiles/ with a symlink to bob's
// profiles/. No capture, divert or replayed row lands in bob's: the step
// refuses the path (a symlink in it, and not the directory discovery
// recorded) and the incident waits for an operator.
func TestAttackProfilesSwappedDuringIncident(t *testing.T) {
	base := attackBase(t)
	alice := newAttackUser(t, base, "sgsec-r1alice")
	bob := newAttackUser(t, base, "sgsec-r1bob")
	a := startMultiUserAgent(t, func(o *Options) {
		o.Policies = incident.PolicySet{Replaced: incident.PolicyHold, SidecarLost: incident.PolicyHold, Mispaired: incident.PolicyHold}
	}, alice.hermes, bob.hermes)
	wa := hermestest.StartWriter(t, hermestest.WriterOptions{DB: alice.store(), Session: "alice-s", Rate: 200})
	wb := hermestest.StartWriter(t, hermestest.WriterOptions{DB: bob.store(), Session: "bob-s", Rate: 200})
	waitHolder(t, a, alice.store(), wa.Pid)
	waitHolder(t, a, bob.store(), wb.Pid)
	bobBefore := snapshotTree(t, bob.home)

	hermestest.RenameFreshOver(t, alice.store())
	os.Remove(alice.store() + "-wal")
	os.Remove(alice.store() + "-shm")
	chownTree(t, alice.hermes, alice.uid, alice.gid)
	inc := waitIncident(t, a, alice.store(), 20*time.Second, journal.StatePinned)
	// Held: the writer stays stopped and the window stays open while
	// alice swaps the directory.
	alice.as(t, "mv "+alice.hermes+"/profiles "+alice.hermes+"/profiles.real && ln -s "+bob.hermes+"/profiles "+alice.hermes+"/profiles")

	wk := a.worker(alice.store())
	var relErr error
	if err := wk.do(context.Background(), func() { relErr = wk.engine().Release(inc.ID, incident.PolicyKill) }); err != nil || relErr != nil {
		t.Fatalf("release %s: %v %v", inc.ID, err, relErr)
	}
	waitExit(t, wa, 10*time.Second)
	// The divert into the swapped path must be refused; give the engine
	// the time to try (and retry) it.
	hermestest.Eventually(t, "the incident to stop at the swapped directory", 30*time.Second, func() bool {
		cur, err := a.journal.GetIncident(context.Background(), inc.ID)
		return err == nil && (cur.Detail.Error != "" || cur.State == journal.StateFailed || cur.State == journal.StateResolved)
	})
	a.reconcile()
	if err := a.worker(alice.store()).do(context.Background(), func() {}); err != nil {
		t.Fatal(err)
	}
	if n, _ := rowsOfSession(t, bob.store(), "alice-s", ""); n != 0 {
		t.Fatalf("%d of alice's rows replayed into bob's store", n)
	}
	checkNothingNew(t, bob.home, bobBefore)
	// The step that met the swapped path stopped there and says so; the
	// orphan stays pinned for an operator, nothing was written elsewhere.
	cur, _ := a.journal.GetIncident(context.Background(), inc.ID)
	if cur.State == journal.StateResolved {
		t.Fatalf("incident resolved through a swapped profiles/: %+v", cur)
	}
	t.Logf("incident after the swap: %s, %q", cur.State, cur.Detail.Error)
	if m, _ := filepath.Glob(filepath.Join(bob.hermes, "profiles", "work", "*retired-wal*")); len(m) != 0 {
		t.Fatalf("capture written into bob's profile: %v", m)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// Issue 14, row 2: alice points her profiles/ at bob's before bob's
// incident and swaps it back during its grace. Bob's store is watched once
// (through his own home), so his event is one incident; no copy of his
// files lands in alice's home and none of his rows in her store.
func TestAttackProfilesLinkedBeforeAnotherUsersIncident(t *testing.T) {
	base := attackBase(t)
	alice := newAttackUser(t, base, "sgsec-r2alice")
	bob := newAttackUser(t, base, "sgsec-r2bob")
	alice.as(t, "mv "+alice.hermes+"/profiles "+alice.hermes+"/profiles.real && ln -s "+bob.hermes+"/profiles "+alice.hermes+"/profiles")
	a := startMultiUserAgent(t, nil, alice.hermes, bob.hermes)
	if a.worker(alice.store()) != nil {
		t.Fatalf("bob's store is watched through alice's link %s", alice.store())
	}
	wb := hermestest.StartWriter(t, hermestest.WriterOptions{DB: bob.store(), Session: "bob-s", Rate: 200})
	waitHolder(t, a, bob.store(), wb.Pid)

	hermestest.RenameFreshOver(t, bob.store())
	os.Remove(bob.store() + "-wal")
	os.Remove(bob.store() + "-shm")
	chownTree(t, bob.hermes, bob.uid, bob.gid)
	waitIncident(t, a, bob.store(), 20*time.Second, journal.StatePinned, journal.StateReleased, journal.StateCaptured,
		journal.StateDiverted, journal.StateReplaying, journal.StateResolved)
	alice.as(t, "rm "+alice.hermes+"/profiles && mv "+alice.hermes+"/profiles.real "+alice.hermes+"/profiles")
	inc := waitIncident(t, a, bob.store(), 30*time.Second, journal.StateResolved, journal.StateFailed)
	if inc.State != journal.StateResolved {
		t.Fatalf("bob's incident: %s %q", inc.State, inc.Detail.Error)
	}
	a.reconcile()
	incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(incs) != 1 {
		t.Fatalf("%d incidents for one event: %+v", len(incs), incs)
	}
	filepath.WalkDir(alice.home, func(p string, _ os.DirEntry, err error) error {
		if err == nil && (strings.Contains(p, "retired-wal") || strings.Contains(p, "recovered")) {
			t.Errorf("a copy of bob's data in alice's home: %s", p)
		}
		return nil
	})
	if n, _ := rowsOfSession(t, alice.store(), "bob-s", ""); n != 0 {
		t.Fatalf("%d of bob's rows in alice's store", n)
	}
	if miss := missingAcks(wb.Acks(t), captureRows(t, inc.Detail.CapturePath)); len(miss) > 0 {
		t.Fatalf("%d of bob's acknowledged rows missing from his capture", len(miss))
	}
	if !strings.HasPrefix(inc.Detail.CapturePath, filepath.Dir(bob.store())+"/") {
		t.Fatalf("bob's capture %s is not in his profile directory", inc.Detail.CapturePath)
	}
}

// A profile directory re-created under its name (a profile deleted and
// made again) is a new directory: the next rescan gives its store a worker
// that records it, so its steps are not refused for ever.
func TestRecreatedProfileDirGetsNewWorker(t *testing.T) {
	base := attackBase(t)
	home := filepath.Join(base, ".hermes")
	db := filepath.Join(home, "profiles", "work", "state.db")
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	a := startMultiUserAgent(t, nil, home)
	old := a.worker(db)
	if old == nil || old.st.DirID.IsZero() {
		t.Fatalf("worker of %s: %+v", db, old)
	}
	if err := os.Rename(filepath.Dir(db), filepath.Dir(db)+".gone"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	// As the walker does: refreshStores runs under walkMu, never beside
	// the agent's own rescan.
	a.walkMu.Lock()
	err := a.refreshStores()
	a.walkMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	now := a.worker(db)
	want, err := store.OpenDir(filepath.Dir(db), store.DirID{})
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	if now == nil || now == old || now.st.DirID != want.ID() {
		t.Fatalf("after re-creating %s: worker %p (was %p), DirID %v, want %v", filepath.Dir(db), now, old, now.st.DirID, want.ID())
	}
}
