package supervisor

import (
	"sync"
	"sync/atomic"
)

// Guards per owner. The fd budget for guards (fdlimit.go) is shared by
// every user whose stores the agent watches; with one global count, one
// user's thousands of crashed-open stores (each an armed guard: a -shm
// and a main left behind) took the whole budget and left every other
// user's stores unguarded. So each owner (the uid of the profile
// directory) gets a share, the budget over the number of owners with
// watched stores, on top of the global cap: an arm fits only under both.
// When an owner under its share is refused because others hold the whole
// budget (they armed before it had stores), guards of owners over their
// share let go one by one, at their next tick, until it fits.

// reasonOwnerShare is the guard status of a store whose owner holds its
// share of the budget (or gave one back to an owner short of its own).
const reasonOwnerShare = "its owner's stores hold their share of the guards' open-file budget, which the users with stores share (raise LimitNOFILE= or ulimit -n)"

type guardShares struct {
	mu     sync.Mutex
	stores map[int]int   // watched stores per owner uid (-1: unknown)
	armed  map[int]int64 // armed guards per owner
	// starved counts arms refused to an owner under its share because
	// the global cap was reached; each is one guard an owner over its
	// share gives back. Written under mu, read without it by owesYield's
	// fast path (every store at every reconcile).
	starved atomic.Int64
	said    map[int]bool // owners told once that they reached their share
}

func newGuardShares() *guardShares {
	return &guardShares{stores: map[int]int{}, armed: map[int]int64{}, said: map[int]bool{}}
}

// addStore counts a watched store of uid in (d = 1) or out (d = -1).
func (g *guardShares) addStore(uid, d int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stores[uid] += d; g.stores[uid] <= 0 {
		delete(g.stores, uid)
	}
}

func (g *guardShares) armedAdd(uid int, d int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.armed[uid] += d; g.armed[uid] <= 0 {
		delete(g.armed, uid)
	}
}

// shareLocked is one owner's share of budget.
func (g *guardShares) shareLocked(budget int64) int64 {
	return max(budget/int64(max(len(g.stores), 1)), 1)
}

// mayArm reports whether uid may arm one more guard with total armed
// now: under its share and under the global cap.
func (g *guardShares) mayArm(uid int, total, budget int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return total < budget && g.armed[uid] < g.shareLocked(budget)
}

// room is mayArm for an arm about to happen; why is the guard's status
// when it may not. An owner under its share refused by the global cap
// makes an owner over its share give one back (yield).
func (g *guardShares) room(uid int, total, budget int64) (ok bool, why string, first bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	under := g.armed[uid] < g.shareLocked(budget)
	switch {
	case under && total < budget:
		return true, "", false
	case total >= budget:
		if under {
			// Bounded: at most every guard an owner over its share holds.
			g.starved.Store(min(g.starved.Load()+1, budget))
		}
		return false, reasonFDLimit, false
	}
	first = !g.said[uid]
	g.said[uid] = true
	return false, reasonOwnerShare, first
}

// owesYield reports whether an armed guard of uid should let go: uid
// holds more than its share and an owner under its share is waiting.
func (g *guardShares) owesYield(uid int, budget int64) bool {
	if g.starved.Load() == 0 {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.starved.Load() > 0 && g.armed[uid] > g.shareLocked(budget)
}

// yield is owesYield for a guard about to let go; it takes one waiting
// arm off the count.
func (g *guardShares) yield(uid int, budget int64) bool {
	if g.starved.Load() == 0 {
		return false // every check of an armed store passes here
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.starved.Load() == 0 || g.armed[uid] <= g.shareLocked(budget) {
		return false
	}
	g.starved.Add(-1)
	return true
}
