package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/alert"
	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// Issue 33: budgets and rate limits per owner, with real users.

// profile makes another named profile with an empty store, the user's.
func (u attackUser) profile(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(u.hermes, "profiles", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	chownTree(t, dir, u.uid, u.gid)
	return db
}

// writer runs a Hermes-schema writer on db as the user, so the -wal and
// -shm it makes are the user's.
func (u attackUser) writer(t *testing.T, db string) *hermestest.Writer {
	t.Helper()
	ack := filepath.Join(u.home, "ack-"+filepath.Base(filepath.Dir(db)))
	return hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 10, Ack: ack,
		Credential: &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid)}})
}

// guardsOf counts the armed guards of dbs.
func guardsOf(a *Agent, dbs []string) (armed int, states []string) {
	for _, db := range dbs {
		w := a.worker(db)
		if w == nil {
			states = append(states, db+": not watched")
			continue
		}
		g := w.guardState()
		if g != nil && g.State == control.GuardArmed {
			armed++
		}
		states = append(states, fmt.Sprintf("%s: %+v", db, g))
	}
	return armed, states
}

// Carol's open stores take the whole guard budget before dave has a
// store; when dave's store appears it still gets a guard: carol's give
// one back, and the total stays within the budget.
func TestAttackGuardBudgetPerOwner(t *testing.T) {
	base := attackBase(t)
	carol := newAttackUser(t, base, "sg-carol")
	dave := newAttackUser(t, base, "sg-dave")
	// dave's store appears only later (his profile directory is there).
	later := dave.store() + ".later"
	if err := os.Rename(dave.store(), later); err != nil {
		t.Fatal(err)
	}
	const budget = 4
	limit := 256 + 3*budget // guardBudget(268) = 4
	if got := guardBudget(limit); got != budget {
		t.Fatalf("guardBudget(%d) = %d", limit, got)
	}
	a := startMultiUserAgent(t, func(o *Options) { o.Guard, o.OpenFileLimit = true, limit }, carol.hermes, dave.hermes)

	carols := []string{carol.store()}
	for i := range 5 {
		carols = append(carols, carol.profile(t, fmt.Sprintf("p%d", i)))
	}
	a.reconcile()
	for _, db := range carols {
		carol.writer(t, db)
	}
	var seen []string
	defer func() {
		if t.Failed() {
			t.Logf("guards last seen:\n%v", seen)
		}
	}()
	hermestest.Eventually(t, "carol's stores to take the whole budget", 30*time.Second, func() bool {
		var n int
		n, seen = guardsOf(a, carols)
		return n == budget
	})

	if err := os.Rename(later, dave.store()); err != nil {
		t.Fatal(err)
	}
	a.reconcile()
	dave.writer(t, dave.store())
	hermestest.Eventually(t, "dave's store to be guarded", 30*time.Second, func() bool {
		var n int
		n, seen = guardsOf(a, []string{dave.store()})
		return n == 1
	})
	c, cs := guardsOf(a, carols)
	seen = cs
	if c > budget-1 || a.Armed() > budget {
		t.Errorf("carol holds %d guards, the agent %d: want carol at most %d, all within %d", c, a.Armed(), budget-1, budget)
	}
}

// crashedOpenStore leaves a store as a killed writer does: main, -wal
// and -shm, no process. It returns the three files' directory.
func crashedOpenStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: filepath.Join(dir, "state.db"), Create: true, Count: 5, Linger: true})
	w.WaitAcks(t, 5)
	w.Kill()
	<-w.Done()
	return dir
}

// Carol makes profiles with crashed-open stores in a loop while the alert
// command is stuck: each new store's guard.armed used to take a place in
// the queue, and dave's incident.opened was dropped. Her alerts now share
// one window, and dave's error-level alert is delivered.
func TestAttackAlertFloodKeepsOtherUsersIncident(t *testing.T) {
	base := attackBase(t)
	carol := newAttackUser(t, base, "sg-carol")
	dave := newAttackUser(t, base, "sg-dave")
	dir := t.TempDir()
	out, release := filepath.Join(dir, "out"), filepath.Join(dir, "release")
	script := hermestest.WriteScript(t, dir, "gate.sh", fmt.Sprintf(`until [ -e %q ]; do sleep 0.02; done
cat >> %q; echo >> %[2]q; echo "--end--" >> %[2]q
`, release, out))
	var al *alert.Alerter
	a := startMultiUserAgent(t, func(o *Options) {
		o.Guard = true
		al = alert.New(alert.Config{Exec: []string{script}, Concurrency: 1, Queue: 4, Timeout: time.Minute, Quiet: QuietEvents()}, o.Logger)
		o.Logger = slog.New(alert.Handler(o.Logger.Handler(), al))
	}, carol.hermes, dave.hermes)
	t.Cleanup(func() { os.WriteFile(release, nil, 0o600); al.Close(t.Context()) })

	tmpl := crashedOpenStore(t)
	var carols []string
	for i := range 20 {
		db := filepath.Join(carol.hermes, "profiles", fmt.Sprintf("p%d", i), "state.db")
		// Hers before anything is in it: the agent may see the store at
		// once, and the alert's owner is the directory's.
		if err := os.Mkdir(filepath.Dir(db), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Dir(db), carol.uid, carol.gid); err != nil {
			t.Fatal(err)
		}
		for _, sfx := range []string{"", "-wal", "-shm"} {
			hermestest.CopyFile(t, filepath.Join(tmpl, "state.db"+sfx), db+sfx, 0o600)
		}
		chownTree(t, filepath.Dir(db), carol.uid, carol.gid)
		carols = append(carols, db)
	}
	a.reconcile()
	hermestest.Eventually(t, "carol's crashed-open stores to be guarded", 30*time.Second, func() bool {
		n, _ := guardsOf(a, carols)
		return n == len(carols)
	})

	w := dave.writer(t, dave.store())
	waitHolder(t, a, dave.store(), w.Pid)
	hermestest.RestoreOver(t, dave.store())
	chownTree(t, dave.hermes, dave.uid, dave.gid)
	// Past its first state: incident.opened is logged after the journal
	// records the incident, and the alerter must not be closed before.
	waitIncident(t, a, dave.store(), 30*time.Second, journal.StatePinned, journal.StateReleased,
		journal.StateCaptured, journal.StateDiverted, journal.StateReplaying, journal.StateResolved, journal.StateFailed,
		journal.StateNeedsAction, journal.StateUnrecoverable)

	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := al.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var daves, carolArmed int
	for _, run := range hermestest.Runs(t, out) {
		var doc struct{ Event, Store string }
		if err := json.Unmarshal([]byte(strings.TrimSpace(run)), &doc); err != nil {
			t.Fatalf("alert document %q: %v", run, err)
		}
		switch {
		case doc.Event == incident.EventIncidentOpened && doc.Store == dave.store():
			daves++
		case doc.Event == EventGuardArmed && strings.HasPrefix(doc.Store, carol.hermes):
			carolArmed++
		}
	}
	if daves != 1 {
		t.Errorf("dave's incident.opened delivered %d times, want 1 (stats %+v)", daves, al.Stats())
	}
	if carolArmed > 1 {
		t.Errorf("carol's %d new stores made %d guard.armed alerts in one window, want 1", len(carols), carolArmed)
	}
}
