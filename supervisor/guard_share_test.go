package supervisor

import "testing"

// The share arithmetic: two owners with stores split a budget of 4; an
// owner at its share is refused while the budget has room, and an owner
// under its share refused by the full budget makes one over it yield.
func TestGuardSharesSplitTheBudget(t *testing.T) {
	const budget, carol, dave = 4, 1001, 1002
	g := newGuardShares()
	g.addStore(carol, 1)
	var total int64
	arm := func(uid int) (bool, string) {
		ok, why, _ := g.room(uid, total, budget)
		if ok {
			g.armedAdd(uid, 1)
			total++
		}
		return ok, why
	}
	for range budget { // alone: the whole budget
		if ok, why := arm(carol); !ok {
			t.Fatalf("carol alone refused at %d: %s", total, why)
		}
	}
	g.addStore(dave, 1)
	if ok, why := arm(dave); ok || why != reasonFDLimit {
		t.Fatalf("dave with the budget full: %v %q, want refused by the limit", ok, why)
	}
	if !g.owesYield(carol, budget) || g.owesYield(dave, budget) {
		t.Fatal("carol over her share does not owe dave a guard")
	}
	if !g.yield(carol, budget) || g.yield(carol, budget) {
		t.Fatal("carol should give back exactly the one guard dave waits for")
	}
	g.armedAdd(carol, -1)
	total--
	if ok, why := arm(dave); !ok {
		t.Fatalf("dave after carol yielded: %s", why)
	}
	// Over her share (2 of 4) with room in the budget: carol is refused.
	g.armedAdd(dave, -1)
	total--
	if ok, why := arm(carol); ok || why != reasonOwnerShare {
		t.Fatalf("carol over her share: %v %q, want refused by the share", ok, why)
	}
}
