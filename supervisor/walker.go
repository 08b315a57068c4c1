package supervisor

import (
	"context"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
)

// The reconcile walker is the safety net behind the watches, and the one
// goroutine that does discovery. At every reconcile it re-runs discovery,
// runs one full holder scan (which reads what is at every store's paths
// anyway) and then checks only the stores that scan says need it: what
// is at a path is not what the store's worker last saw (an event that
// was missed, an unwatched directory), an orphan holder, the last holder
// gone (the idle checkpoint), an open incident, or a retry the worker
// asked for. Every other store costs a map lookup and three identity
// comparisons; no worker runs a timer of its own for it. Those checks run
// one after the other, on each store's worker, paced so that the walk
// uses at most walkBudget of one core and never waits long on one busy
// store.

// walkBudget is the share of one core the walk's checks may use; the
// rest of the interval it sleeps.
const walkBudget = 0.25

// walkStepTimeout bounds the wait for one store's check: a worker deep in
// a capture gets its check when it is done, and the walk moves on.
const walkStepTimeout = time.Second

// walkState is the walker's memory between reconciles; it is touched
// only under Agent.walkMu, which serializes reconciles and discovery
// (the walker's, and a test's own calls).
type walkState struct {
	held map[string]bool // the store had holders at the last reconcile
	runs int64           // reconciles done
	// checked counts the checks the walker asked for, for tests: an idle
	// store must not be checked at every reconcile.
	checked int64
}

func (a *Agent) reconcileLoop() {
	defer a.wg.Done()
	for {
		select {
		case <-a.quit:
			return
		case <-a.reconcileC:
			a.reconcile()
		case <-a.rediscoverC:
			a.walkMu.Lock()
			if err := a.refreshStores(); err != nil {
				a.log.Error("rediscovery failed", "err", err)
			}
			a.walkMu.Unlock()
		}
	}
}

// reconcile is the safety net: rediscover, re-scan every process, and
// check the stores whose state the scan says differs from their
// worker's. It returns early once the agent is closing.
func (a *Agent) reconcile() {
	a.walkMu.Lock()
	defer a.walkMu.Unlock()
	t0 := time.Now()
	if a.discoveryDue() {
		if err := a.refreshStores(); err != nil {
			a.log.Error("rediscovery failed", "err", err)
		}
	}
	// A pending store in a directory that could not be watched has sent
	// no event: its lstat here is what starts it.
	a.startAll(a.activatePresent(a.pendingUncovered()))
	res := a.scanStores(true)
	now := time.Now()
	a.opts.Metrics.Reconciled(now)
	due := a.reconcileDue(res)
	a.walkChecks(a.quitCtx, due, now)
	a.walkPartials(a.quitCtx)
	a.walk.runs++
	// The bench (internal/benchscale) reads this line.
	a.log.Debug("reconcile done", "took_ms", float64(time.Since(t0).Microseconds())/1000, "checked", len(due))
}

// reconcileDue lists the workers the scan res says need a check. With no
// scan (it failed) that is every worker.
func (a *Agent) reconcileDue(res *holders.Result) []*worker {
	var due []*worker
	ws := a.allWorkers()
	// held lists only the stores held at the last reconcile: an idle
	// store costs no write here.
	held := make(map[string]bool, len(a.walk.held))
	for i, w := range ws {
		var sr *holders.StoreResult
		switch {
		case res == nil:
		case i < len(res.Stores) && res.Stores[i].Target.Path == w.target.Path:
			sr = &res.Stores[i] // the scan's order is the workers' (workerList)
		default:
			sr = res.Store(w.st.Path)
		}
		isHeld := sr != nil && len(sr.Holders) > 0
		wasHeld := a.walk.held[w.st.Key()]
		if isHeld {
			held[w.st.Key()] = true
		}
		if sr == nil || w.busy() || w.recheck.Load() || (wasHeld && !isHeld) ||
			len(sr.Orphans()) > 0 || !sameAsSeen(sr, w.seen.Load()) || guardOwed(w, sr) || guardYields(w) {
			due = append(due, w)
		}
	}
	a.walk.held = held
	return due
}

// sameAsSeen reports whether the identities the scan found at a store's
// paths are those its worker saw at its last check (nil: never checked).
func sameAsSeen(sr *holders.StoreResult, seen *fileid.Family) bool {
	if seen == nil {
		return false
	}
	id := func(r holders.Role) fileid.ID {
		if st := sr.Current.Of(r); st.Exists {
			return st.ID
		}
		return fileid.ID{}
	}
	return id(holders.RoleMain) == seen.Main && id(holders.RoleWAL) == seen.WAL && id(holders.RoleSHM) == seen.SHM
}

// walkChecks runs each due worker's check on that worker, one at a time,
// sleeping between them so the checks use at most walkBudget of a core.
func (a *Agent) walkChecks(ctx context.Context, due []*worker, at time.Time) {
	var work time.Duration
	start := time.Now()
	for _, w := range due {
		if ctx.Err() != nil {
			return
		}
		a.walk.checked++
		if w.busy() {
			// An open incident's worker wakes every second by itself
			// and may be deep in a step: ask, never wait.
			w.kick(at)
			continue
		}
		t0 := time.Now()
		sctx, cancel := context.WithTimeout(ctx, walkStepTimeout)
		err := w.do(sctx, func() { w.check(at) })
		cancel()
		if err != nil {
			w.kick(at) // busy or stopping: its next wake checks
			continue   // waiting is not work: the budget counts checks run
		}
		work += time.Since(t0)
		if rest := time.Duration(float64(work)/walkBudget) - time.Since(start); rest > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(rest):
			}
		}
	}
}

// walkPartials cleans the stale partial captures of every store not
// cleaned yet (each store once: all at the first reconcile, a store
// discovered later at the next), paced like the checks: at 10,000 stores
// a directory listing each was a fifth of the start.
func (a *Agent) walkPartials(ctx context.Context) {
	var work time.Duration
	start := time.Now()
	for _, w := range a.allWorkers() {
		if ctx.Err() != nil {
			return
		}
		if w.partialsCleaned.Load() {
			continue
		}
		t0 := time.Now()
		w.cleanPartials()
		work += time.Since(t0)
		// A listing takes microseconds: sleep in slices of some
		// milliseconds, not once per store.
		if rest := time.Duration(float64(work)/walkBudget) - time.Since(start); rest > 5*time.Millisecond {
			select {
			case <-ctx.Done():
				return
			case <-time.After(rest):
			}
		}
	}
}

// guardOwed reports whether a store whose main and -shm exist has a guard
// that is not armed although it is wanted: every reconcile retries the
// arm, whatever made the last one fail.
func guardOwed(w *worker, sr *holders.StoreResult) bool {
	if !sr.Current.Of(holders.RoleMain).Exists || !sr.Current.Of(holders.RoleSHM).Exists {
		return false
	}
	g := w.guardState()
	if g == nil || g.State != control.GuardUnavailable {
		return false
	}
	// Past the fd budget nothing changes until a guard lets go: checking
	// every such store at every reconcile would only spend the budget
	// of the walk.
	if g.Reason != reasonFDLimit && g.Reason != reasonOwnerShare {
		return true
	}
	return w.a.shares.mayArm(ownerOf(w.st.DirID), w.a.armed.Load(), w.a.guardBudget)
}

// guardYields reports whether the store's armed guard is one its owner,
// over its share, gives back to another owner waiting (guard_share.go).
func guardYields(w *worker) bool {
	if !w.a.shares.owesYield(ownerOf(w.st.DirID), w.a.guardBudget) {
		return false // nobody waits: what nearly every reconcile sees
	}
	g := w.guardState()
	return g != nil && g.State == control.GuardArmed
}
