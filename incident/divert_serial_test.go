package incident

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stateguard/stateguard/journal"
)

// Two incidents of one store divert one after the other, the second
// counting the first's rows (Queued): seed 3's mispaired and replaced
// incidents shared an orphan WAL, diverted at once after an agent
// restart, each found the same row missing, and both copies were
// replayed.
func TestStoreDivertsRunOneAtATime(t *testing.T) {
	r := newRig(t, 0)
	hold, held := make(chan struct{}), make(chan string, 4)
	r.hooks.InDivert = func(id string) {
		held <- id
		<-hold
	}
	r.start()
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release) // before the engine's Close, which waits for the diverts
	first := r.open(journal.KindMispaired, PolicyKill, r.writer(201, true, false))
	select {
	case id := <-held:
		if id != first {
			t.Fatalf("divert of %s started, want %s", id, first)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first incident never began its divert")
	}
	r.now = r.now.Add(4 * time.Second)
	r.open(journal.KindReplaced, PolicyKill, r.writer(202, true, false))
	var second string
	for _, id := range r.eng.IDs() {
		if id != first {
			second = id
		}
	}
	if second == "" {
		t.Fatalf("no second incident: %v", r.eng.IDs())
	}
	for range 5 {
		r.eng.Advance()
	}
	select {
	case id := <-held:
		t.Fatalf("divert of %s started while %s's runs", id, first)
	default:
	}
	if inc, _ := r.j.GetIncident(t.Context(), second); inc.State != journal.StateCaptured {
		t.Fatalf("second incident %s, want captured (waiting for the first divert)", inc.State)
	}
	release()
	r.drain()
	if got := len(r.salv.diverts); got != 2 {
		t.Fatalf("%d diverts ran, want 2", got)
	}
	if q := r.salv.diverts[1].Queued; !slices.Contains(q, first) || slices.Contains(q, second) {
		t.Fatalf("second divert's queued incidents %v, want %s and not itself", q, first)
	}
	for _, id := range []string{first, second} {
		if inc := r.settle(id); inc.State != resolved {
			t.Fatalf("incident %s ended %s (%s)", id, inc.State, inc.Detail.Error)
		}
	}
}
