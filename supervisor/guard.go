package supervisor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// The guard (docs/design.md §9) holds OFD read locks on
// the live generation of each Hermes store in WAL mode, so no process that
// wrongly believes it is the last connection can checkpoint and unlink
// -wal/-shm under a live writer.
//
// Safety: a guard's fds are opened and closed only on the store's worker
// goroutine, the store's serialized context. close(2) drops every POSIX
// lock this process holds on the inode, so it must never happen while the
// agent has a SQLite connection on it. The agent's connections use OFD
// locks (store.UseOFDLocks, called by agentd's main), which a close of another fd cannot cancel, and
// besides, the worker opens a connection on a store only for the length of
// one step (snapshotMain's read transaction, the stall check), never
// across guardSync or guardTick, which run between steps.

// workerGuard is one store's guard. g, pause and the bookkeeping belong to
// the worker goroutine; mu guards status, which the control API reads.
type workerGuard struct {
	g       *holders.Guard
	pause   *journal.GuardPause
	loaded  bool   // pause read from the journal
	failed  string // the last guard.failed logged, so a lasting failure is said once
	foreign string // the last store.foreign logged (foreignfile.go)
	retry   bool   // the last arm failed transiently: the tick tries again
	// retryAt is when; retryWait grows from guardRetryMin to wakeBusy, so
	// a connection setting up a new -shm (its write lock lasts
	// microseconds) is not left unguarded for a second, and one holding
	// EXCLUSIVE for long is not polled in a loop.
	retryAt   time.Time
	retryWait time.Duration
	// claimedWAL is the guard's -wal when an incident's holders hold it:
	// its unlink is that incident's orphan, not a lost -wal (lostWAL).
	claimedWAL fileid.ID
	// lost are earlier guards kept for an unlinked -wal (lostguard.go).
	lost []*holders.Guard

	mu     sync.Mutex
	status control.GuardStatus
	set    bool
}

// guardWanted applies the config: a per-store setting wins; otherwise
// Hermes stores follow the global switch and generic stores stay off.
func (a *Agent) guardWanted(s store.Store) (bool, string) {
	r := a.live.Load()
	if on, ok := r.storeGuard[s.Path]; ok {
		if !on {
			return false, "guard = false for this store"
		}
		return true, ""
	}
	if s.Kind != store.Hermes {
		return false, "generic store (set guard = true in its [[store]] to arm it)"
	}
	if !r.guard {
		return false, "guard = false"
	}
	return true, ""
}

// guardSync arms, re-arms or disarms the store's guard for generation gen.
// It runs on the worker after every check.
func (w *worker) guardSync(gen store.Generation) {
	gd := &w.guard
	if on, why := w.a.guardWanted(w.st); !on {
		w.guardRelease("guard off")
		w.guardSet(control.GuardStatus{State: control.GuardOff, Reason: why})
		return
	}
	w.guardLoad()
	if p := gd.pause; p != nil {
		if p.Active(time.Now()) {
			w.guardRelease("paused")
			w.guardSet(control.GuardStatus{State: control.GuardPaused, Until: p.Until, Reason: p.Reason})
			return
		}
		gd.pause = nil
		w.log.Info("guard pause over", "until", p.Until)
	}
	if w.refuseForeign(gen) {
		return
	}
	w.guardArm(gen)
}

// guardTick runs once a second on the worker: a pause that has run out
// re-arms, and an arm that failed for a passing reason is retried.
func (w *worker) guardTick(now time.Time) {
	gd := &w.guard
	if (gd.pause != nil && !gd.pause.Active(now)) || (gd.retry && !now.Before(gd.retryAt)) {
		w.guardSync(w.readGeneration())
	}
}

// guardRetryMin is the first retry's wait after a transient arm failure.
const guardRetryMin = 5 * time.Millisecond

// setRetry schedules the next arm attempt after a transient failure
// (doubling the wait up to wakeBusy), or clears it.
func (gd *workerGuard) setRetry(on bool) {
	gd.retry = on
	if !on {
		gd.retryWait, gd.retryAt = 0, time.Time{}
		return
	}
	gd.retryWait = min(max(2*gd.retryWait, guardRetryMin), wakeBusy)
	gd.retryAt = time.Now().Add(gd.retryWait)
}

// guardClose releases the store's guard when its worker stops.
func (w *worker) guardClose() {
	why := "store no longer watched"
	if w.a.quitting() {
		why = "agent stopping"
	}
	w.guardRelease(why)
	w.closeLostWALs(why)
	w.guardSet(control.GuardStatus{State: control.GuardOff, Reason: why})
}

// errNotWAL marks a main file the guard must not lock.
var errNotWAL = errors.New("not in WAL mode")

// requireWAL refuses a main file whose header does not say WAL: in
// rollback-journal mode writers need the SHARED range to commit.
func requireWAL(b []byte) error {
	h, err := store.ParseMainHeader(b)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotWAL, err)
	}
	if !h.WAL() {
		return fmt.Errorf("%w: header says rollback journal (versions %d/%d)", errNotWAL, h.WriteVersion, h.ReadVersion)
	}
	return nil
}

func guardFiles(gen store.Generation) fileid.Family { return gen.IDs() }

// familyFiles names a family's inodes for the holder cache.
func (w *worker) familyFiles(f fileid.Family) []holders.KnownFile {
	var out []holders.KnownFile
	for _, k := range []holders.KnownFile{{Role: holders.RoleMain, ID: f.Main}, {Role: holders.RoleWAL, ID: f.WAL}, {Role: holders.RoleSHM, ID: f.SHM}} {
		if !k.ID.IsZero() {
			// The guard's fds keep these numbers from being reused.
			k.Store, k.Pinned = w.st.Path, true
			out = append(out, k)
		}
	}
	return out
}

// guardArm arms gen. A new generation is armed before the old one's fds
// are closed, so a store is never unguarded across a change.
func (w *worker) guardArm(gen store.Generation) {
	gd := &w.guard
	want := guardFiles(gen)
	old := gd.g
	if old != nil && w.a.shares.yield(ownerOf(w.st.DirID), w.a.guardBudget) {
		// Its owner holds more than its share and another user's store
		// waits for a guard (guard_share.go).
		w.guardUnavailable(false, reasonOwnerShare)
		return
	}
	if old != nil && old.IDs() == want && gen.Main.Exists && gen.SHM.Exists {
		w.guardSet(control.GuardStatus{State: control.GuardArmed})
		return
	}
	// While the main file is unchanged, the old guard's main lock still
	// stops a wrong last closer; keep it until the new -shm can be armed.
	mainSame := old != nil && gen.Main.Exists && old.IDs().Main == want.Main
	switch {
	case !gen.Main.Exists:
		w.guardUnavailable(false, reasonNoMain)
		return
	case !gen.Main.Regular() || (gen.SHM.Exists && !gen.SHM.Regular()):
		w.guardUnavailable(false, "main or -shm is not a regular file")
		return
	case !gen.SHM.Exists:
		w.guardUnavailable(mainSame, reasonNoSHM)
		return
	case old != nil && !mainSame && old.IDs().SHM == want.SHM:
		// The main was replaced under the old sidecars (mispaired): a
		// read lock on that -shm would make the next opener trust its
		// stale index; the incident or foreign-sidecar check moves it.
		w.guardUnavailable(false, "the -shm at the path belongs to the replaced main file")
		return
	}
	if ok, why := w.a.guardRoom(old != nil, ownerOf(w.st.DirID)); !ok {
		// Under its owner's share, a guard of another owner gives one
		// back at its next check: retried soon. Otherwise the next
		// check or reconcile tries again.
		gd.setRetry(why == reasonFDLimit)
		w.guardUnavailable(mainSame, why)
		return
	}
	g, err := w.armGuardChecked(want)
	if err != nil {
		switch {
		case errors.Is(err, store.ErrDirChanged) || errors.Is(err, store.ErrSymlinkInPath):
			// Not this store's directory any more: nothing is locked
			// there; the next rescan picks up a new directory.
			gd.setRetry(false)
			if key := fmt.Sprint(want, err); gd.failed != key {
				gd.failed = key
				w.log.Warn("guard not armed", "event", EventGuardFailed, "main", want.Main.String(), "shm", want.SHM.String(),
					"err", err, "hint", "the store's directory is not the one discovery recorded; nothing was locked")
			}
			w.guardUnavailable(false, "store directory changed")
		case errors.Is(err, errNotWAL):
			gd.setRetry(false)
			w.guardUnavailable(false, "not in WAL mode")
		case errors.Is(err, fileid.ErrIdentityChanged):
			// A change between the check's lstat and the open: the
			// change's own event brings the next check; the tick
			// retries in case it was folded into this one.
			gd.setRetry(true)
			w.guardUnavailable(mainSame, "store changed while arming; retrying")
		default:
			gd.setRetry(errors.Is(err, holders.ErrGuardRefused))
			why, hint := err.Error(), "the agent retries at every change and reconcile"
			if gd.retry {
				why, hint = "lock refused", "a connection in EXCLUSIVE locking mode (or one setting up the -shm) holds a write lock; retried at once, then every second"
			}
			if key := fmt.Sprint(want, err); gd.failed != key {
				gd.failed = key
				w.log.Warn("guard not armed", "event", EventGuardFailed, "main", want.Main.String(), "shm", want.SHM.String(),
					"err", err, "hint", hint)
			}
			w.guardUnavailable(mainSame, why)
		}
		return
	}
	claimed := gd.claimedWAL
	gd.g, gd.failed, gd.claimedWAL = g, "", fileid.ID{}
	gd.setRetry(false)
	// Its fds keep these inodes alive wherever they are renamed: every
	// scan looks for their holders until the guard lets go.
	w.a.cache.Remember(w.familyFiles(want)...)
	w.log.Info("guard armed", "event", EventGuardArmed, "main", want.Main.String(), "wal", want.WAL.String(), "shm", want.SHM.String())
	if old != nil && !w.keepLostWAL(old, want, claimed) {
		w.guardCloseOne(old, "generation changed")
	}
	w.guardSet(control.GuardStatus{State: control.GuardArmed})
}

// guardUnavailable reports why the live generation is not guarded. With
// keep, the old guard's main lock is kept and status says so.
func (w *worker) guardUnavailable(keep bool, why string) {
	if keep && w.guard.g != nil {
		w.guardSet(control.GuardStatus{State: control.GuardArmed, Reason: "main file only; -shm: " + why})
		return
	}
	w.guardRelease(why)
	w.guardSet(control.GuardStatus{State: control.GuardUnavailable, Reason: why})
}

// guardRelease closes the guard's fds, on the worker only (see the top of
// this file).
func (w *worker) guardRelease(why string) {
	if g := w.guard.g; g != nil {
		w.guard.g = nil
		w.guardCloseOne(g, why)
	}
}

func (w *worker) guardCloseOne(g *holders.Guard, why string) {
	ids := g.IDs()
	if err := g.Close(); err != nil {
		w.log.Warn("guard close", "err", err)
	}
	w.a.cache.ForgetFiles(w.familyFiles(ids)...)
	w.log.Info("guard released", "event", EventGuardReleased, "main", ids.Main.String(), "wal", ids.WAL.String(), "shm", ids.SHM.String(), "reason", why)
}

// guardSet publishes the guard's state and, on a change, the agent-wide
// count of armed stores.
func (w *worker) guardSet(s control.GuardStatus) {
	gd := &w.guard
	gd.mu.Lock()
	changed := !gd.set || gd.status != s
	was := gd.set && gd.status.State == control.GuardArmed
	prev := ""
	if gd.set {
		prev = guardClass(gd.status)
	}
	gd.status, gd.set = s, true
	gd.mu.Unlock()
	if !changed {
		return
	}
	if c := guardClass(s); c != prev {
		w.a.opts.Metrics.GuardStoreMove(prev, c)
	}
	w.log.Debug("guard state", "state", s.State, "reason", s.Reason)
	// The agent-wide count moves by this store's own transition: counting
	// every worker's guard here made starting N stores cost N².
	switch now := s.State == control.GuardArmed; {
	case now && !was:
		w.a.shares.armedAdd(ownerOf(w.st.DirID), 1)
		w.a.armedDelta(1)
	case was && !now:
		w.a.shares.armedAdd(ownerOf(w.st.DirID), -1)
		w.a.armedDelta(-1)
	}
}

// guardLoad reads the store's pause from the journal once, so a pause
// outlives an agent restart.
func (w *worker) guardLoad() {
	gd := &w.guard
	if gd.loaded {
		return
	}
	ps, err := w.a.journal.ActivePauses(w.a.ctx, time.Now())
	if err != nil {
		// Arming is the safe side: a pause only makes room for
		// maintenance. The next sync reads again.
		w.log.Warn("read guard pauses", "err", err)
		return
	}
	gd.loaded = true
	for i := range ps {
		if ps[i].Store == w.st.Key() {
			gd.pause = &ps[i]
		}
	}
}

// The guard's reasons for holding nothing that mean "nothing to hold
// yet" (guard_stores' idle), not "could not".
const (
	reasonNoMain = "no main file at the path"
	reasonNoSHM  = "no -shm yet (it arms when a connection opens the store)"
)

// guardClass is the guard_stores state of a guard status.
func guardClass(s control.GuardStatus) string {
	if s.State == control.GuardUnavailable && (s.Reason == reasonNoMain || s.Reason == reasonNoSHM) {
		return GuardIdle
	}
	return s.State
}

// armedDelta moves the count of armed stores and its gauge.
func (a *Agent) armedDelta(d int64) {
	a.opts.Metrics.GuardArmedAdd(int(d))
	a.armed.Add(d)
}

// Armed is how many stores' guards are armed now.
func (a *Agent) Armed() int { return int(a.armed.Load()) }

// guardState is the store's guard as status shows it; nil before the
// worker's first check.
func (w *worker) guardState() *control.GuardStatus {
	gd := &w.guard
	w.a.work.guardReads.Add(1)
	gd.mu.Lock()
	defer gd.mu.Unlock()
	if !gd.set {
		return nil
	}
	s := gd.status
	return &s
}

// guardStatus is the Status hook: the guard of the store with key.
func (a *Agent) guardStatus(key string) *control.GuardStatus {
	if w := a.worker(key); w != nil {
		return w.guardState()
	}
	return nil
}

// PauseGuard journals a maintenance pause of the store's guard until now+d
// and releases its locks. The pause ends by itself; ResumeGuard ends it
// early.
func (a *Agent) PauseGuard(ctx context.Context, key string, d time.Duration, reason string) (journal.GuardPause, *control.GuardStatus, error) {
	w := a.worker(key)
	if w == nil {
		return journal.GuardPause{}, nil, fmt.Errorf("pause guard: store %s is not watched", key)
	}
	p, err := a.journal.PauseGuard(ctx, key, time.Now().Add(d), reason)
	if err != nil {
		return journal.GuardPause{}, nil, err
	}
	err = w.do(ctx, func() {
		w.guardLoad()
		w.guard.pause = &p
		w.log.Warn("guard paused", "event", EventGuardPaused, "until", p.Until, "reason", p.Reason)
		w.guardSync(w.gen)
	})
	if err != nil {
		return p, nil, fmt.Errorf("pause guard of %s: journaled, but the store's worker did not answer (it releases at its next check): %w", key, err)
	}
	return p, w.guardState(), nil
}

// ResumeGuard ends the store's pause and arms its guard at once; resumed
// is false when no pause was in force.
func (a *Agent) ResumeGuard(ctx context.Context, key string) (resumed bool, _ *control.GuardStatus, _ error) {
	w := a.worker(key)
	if w == nil {
		return false, nil, fmt.Errorf("resume guard: store %s is not watched", key)
	}
	resumed, err := a.journal.ResumeGuard(ctx, key)
	if err != nil {
		return false, nil, err
	}
	err = w.do(ctx, func() {
		w.guardLoad()
		if w.guard.pause != nil {
			w.guard.pause = nil
			w.log.Info("guard pause ended by the operator")
		}
		w.guardSync(w.readGeneration())
	})
	if err != nil {
		return resumed, nil, fmt.Errorf("resume guard of %s: %w", key, err)
	}
	return resumed, w.guardState(), nil
}

// armGuardChecked arms the guard, which opens the store's files by name,
// only inside the directory discovery recorded: the directory is reached
// through its handle (no symlink, same inode and owner) before, and after
// the guard's fds must be the inodes at those names in that directory. A
// profiles/ swapped for a link to another user's in between is caught by
// the second check, so no other store is ever locked on this one's behalf.
func (w *worker) armGuardChecked(want fileid.Family) (*holders.Guard, error) {
	h, err := w.st.OpenDir()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	g, err := holders.ArmGuard(w.st.Path, want, requireWAL)
	if err != nil {
		return nil, err
	}
	if err = h.Verify(); err == nil {
		err = h.SameFiles(filepath.Base(w.st.Path), g.IDs())
	}
	if err != nil {
		_ = g.Close()
		return nil, err
	}
	return g, nil
}
