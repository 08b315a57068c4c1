package supervisor

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/journal"
)

// Readiness and liveness for the service manager (agentd's READY=1 and
// watchdog keepalives). Both travel through each store's worker loop, the
// one goroutine that detects and runs the store's incidents: an answer
// proves that loop still turns, which a live process or a served socket
// does not.

// aliveTicks are the liveness ticks in flight, one per worker at most, so
// a wedged worker's request queue never fills with them.
type aliveTicks struct {
	mu    sync.Mutex
	ticks map[*worker]*aliveTick
}

type aliveTick struct {
	sent   time.Time // when the probe first asked this worker
	queued bool      // in the worker's queue (it may have been full)
	done   chan struct{}
}

func (t *aliveTick) answered() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// Covered waits until every store the agent watches has had a check since
// Start, so a service manager told "ready" is told the truth: each store
// was looked at (a check that could not see everything still counts; the
// scan says unknown and the next reconcile tries again).
func (a *Agent) Covered(ctx context.Context) error {
	for _, w := range a.allWorkers() {
		if w.seen.Load() != nil {
			continue // checked already (Start checks every store)
		}
		err := w.do(ctx, func() {
			// The kick Start queued and this request race in the
			// worker's select; no generation yet means no check has
			// finished, so check now.
			if !w.haveGen {
				w.check(time.Now())
			}
		})
		select {
		case <-w.done:
			continue // retired meanwhile: nothing left to cover
		default:
		}
		if err != nil {
			return fmt.Errorf("store %s: first check: %w", w.st.Path, err)
		}
	}
	return nil
}

// Alive returns nil when every store's worker answered a liveness tick
// within ctx, or is still inside one step that has run for less than
// budget (a capture of a big store takes a while). It names the workers
// that have not answered for longer than budget.
func (a *Agent) Alive(ctx context.Context, budget time.Duration) error {
	live := a.sendTicks(time.Now())
	var stuck []string
	for w, t := range live {
		select {
		case <-t.done:
		case <-w.done:
		case <-ctx.Done():
			select {
			case <-t.done:
				continue
			case <-w.done:
				continue
			default:
			}
			if age := time.Since(t.sent); age > budget {
				stuck = append(stuck, fmt.Sprintf("store %s: worker has not answered for %v", w.st.Path, age.Round(time.Second)))
			}
		}
	}
	if len(stuck) == 0 {
		return nil
	}
	sort.Strings(stuck)
	if len(stuck) == 1 {
		return fmt.Errorf("%s (a step may take %v)", stuck[0], budget)
	}
	return fmt.Errorf("%s, and %d more stores (a step may take %v)", stuck[0], len(stuck)-1, budget)
}

// sendTicks gives every worker without a tick in flight a new one, and
// returns the ticks of the current workers.
func (a *Agent) sendTicks(now time.Time) map[*worker]*aliveTick {
	ws := a.allWorkers()
	a.alive.mu.Lock()
	defer a.alive.mu.Unlock()
	live := make(map[*worker]*aliveTick, len(ws))
	for _, w := range ws {
		t := a.alive.ticks[w]
		if t == nil || t.answered() {
			t = &aliveTick{sent: now, done: make(chan struct{})}
		}
		if !t.queued && !w.running.Load() {
			// No goroutine: the worker is idle, with nothing queued to
			// wait behind; whatever comes next starts a fresh one.
			close(t.done)
			t.queued = true
		}
		if !t.queued {
			done := t.done
			select {
			case w.reqC <- func() { close(done) }:
				t.queued = true
				w.wakeUp()
			default: // queue full; the next probe tries again, timed from now
			}
		}
		live[w] = t
	}
	a.alive.ticks = live // retired workers' ticks go
	return live
}

// Summary is the agent at a glance, for the service manager's status line.
type Summary struct {
	Stores        int // watched
	GuardsArmed   int
	IncidentsOpen int // not yet in a terminal state
	ReplayQueue   int // replay jobs queued or running
}

func (s Summary) String() string {
	return fmt.Sprintf("%d stores watched, %d guards armed, %d incidents open, %d replays queued",
		s.Stores, s.GuardsArmed, s.IncidentsOpen, s.ReplayQueue)
}

// Summary counts stores, armed guards, open incidents and queued replays.
func (a *Agent) Summary(ctx context.Context) (Summary, error) {
	var s Summary
	for _, w := range a.allWorkers() {
		s.Stores++
		if g := w.guardState(); g != nil && g.State == control.GuardArmed {
			s.GuardsArmed++
		}
		s.IncidentsOpen += len(w.liveIDs())
	}
	jobs, err := a.journal.ListJobs(ctx, journal.JobFilter{States: []journal.JobState{journal.JobQueued, journal.JobRunning}})
	if err != nil {
		return s, err
	}
	s.ReplayQueue = len(jobs)
	return s, nil
}
