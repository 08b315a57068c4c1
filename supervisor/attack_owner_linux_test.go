package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/internal/hermestest"
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
