package supervisor

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/holders"
)

// A restore announced through the control socket. agentctl restore asks
// before it changes a watched store and says when it is done, so the
// daemon knows the store's next generation is intended: it logs the
// change as the restore's, never treats the restoring process as an
// orphan holder, and refuses a restore while an incident on the store is
// unfinished (the restore would race its capture and replay).
//
// The window does not stop the daemon from protecting anyone else: a
// process that the restore orphans anyway (one the restorer's scan could
// not see) still holds data nobody can reach, and still gets an incident.
//
//	POST /v1/restore/begin   RestoreBeginRequest → RestoreIntent
//	POST /v1/restore/end     RestoreEndRequest
const (
	EventRestoreBegin = "restore.begin"
	EventRestoreEnd   = "restore.end"
)

// restoreEndGrace is how long a window stays open after its end: the
// worker classifies a change once the directory has been quiet for a
// moment (settle), often after the restore said it is done; the last
// change is still the restore's.
const restoreEndGrace = 2 * time.Second

// restoreWindows are an agent's open restore windows, per store; entries
// go when a window ends or lapses.
type restoreWindows struct {
	mu sync.Mutex
	m  map[string]control.RestoreIntent
	// n is len(m), read without mu: every store's fast freeze asks, and
	// almost always no window is open anywhere.
	n atomic.Int64
}

// open returns the store's open window, dropping a lapsed one (and saying
// so when nobody ended it).
func (r *restoreWindows) open(store string, now time.Time, log *slog.Logger) (control.RestoreIntent, bool) {
	if r.n.Load() == 0 {
		return control.RestoreIntent{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	in, ok := r.m[store]
	if ok && !now.Before(in.Until) {
		delete(r.m, store)
		r.n.Store(int64(len(r.m)))
		if !in.Ended {
			log.Warn("restore window lapsed without an end", "event", EventRestoreEnd, "store", store, "pid", in.PID, "result", "lapsed")
		}
		return control.RestoreIntent{}, false
	}
	return in, ok
}

func (r *restoreWindows) put(in control.RestoreIntent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]control.RestoreIntent{}
	}
	r.m[in.Store] = in
	r.n.Store(int64(len(r.m)))
}

// end closes pid's window on store after restoreEndGrace; false when
// there is no such open window.
func (r *restoreWindows) end(store string, pid int, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	in, ok := r.m[store]
	if !ok || in.PID != pid || in.Ended {
		return false
	}
	in.Ended = true
	if g := now.Add(restoreEndGrace); g.Before(in.Until) {
		in.Until = g
	}
	r.m[store] = in
	return true
}

func (r *restoreWindows) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// restoreIntent returns the store's open window, dropping a lapsed one.
func (a *Agent) restoreIntent(store string, now time.Time) (control.RestoreIntent, bool) {
	return a.intents.open(store, now, a.log)
}

// restoring reports whether a restore window is open on the store; the
// replay queue should leave such a store alone until it ends.
func (a *Agent) restoring(store string) bool {
	_, ok := a.restoreIntent(store, time.Now())
	return ok
}

// intended reports whether the store's changes right now are an
// announced restore's.
func (w *worker) intended() bool { return w.a.restoring(w.st.Path) }

// restorer reports whether ref is the process doing the store's
// announced restore: its connections and fds on the store's old files are
// the restore's own, not an orphan writer's, and must never be frozen.
func (w *worker) restorer(ref holders.ProcRef) bool {
	in, ok := w.a.restoreIntent(w.st.Path, time.Now())
	return ok && in.PID == ref.Pid
}

func (a *Agent) restoreRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/restore/begin", a.handleRestoreBegin)
	mux.HandleFunc("POST /v1/restore/end", a.handleRestoreEnd)
}

func (a *Agent) handleRestoreBegin(rw http.ResponseWriter, r *http.Request) {
	var req control.RestoreBeginRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeErr(rw, http.StatusBadRequest, fmt.Errorf("decode restore request: %w", err))
		return
	}
	if req.Store == "" || req.PID <= 0 {
		writeErr(rw, http.StatusBadRequest, fmt.Errorf("restore request needs store and pid"))
		return
	}
	window := control.DefaultRestoreWindow
	if req.Window > 0 {
		window = min(time.Duration(req.Window)*time.Second, control.MaxRestoreWindow)
	}
	w := a.worker(req.Store)
	if w == nil {
		writeErr(rw, http.StatusNotFound, fmt.Errorf("store %s is not watched by this agent", req.Store))
		return
	}
	if ids := w.liveIDs(); len(ids) > 0 {
		writeErr(rw, http.StatusConflict, fmt.Errorf("store %s has an unfinished incident (%v): a restore now would race its capture and replay; finish it first (agentctl incidents, agentctl release)", req.Store, ids))
		return
	}
	now := time.Now()
	if in, ok := a.restoreIntent(req.Store, now); ok && in.PID != req.PID && !in.Ended {
		writeErr(rw, http.StatusConflict, fmt.Errorf("store %s: a restore by pid %d is in progress until %s", req.Store, in.PID, in.Until.UTC().Format(time.RFC3339)))
		return
	}
	in := control.RestoreIntent{Store: req.Store, PID: req.PID, Until: now.Add(window), DaemonPID: os.Getpid()}
	a.intents.put(in)
	a.log.Info("restore announced", "event", EventRestoreBegin, "store", req.Store, "pid", req.PID,
		"mode", req.Mode, "backup", req.Backup, "until", in.Until.UTC())
	writeJSON(rw, http.StatusOK, in)
}

func (a *Agent) handleRestoreEnd(rw http.ResponseWriter, r *http.Request) {
	var req control.RestoreEndRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeErr(rw, http.StatusBadRequest, fmt.Errorf("decode restore end: %w", err))
		return
	}
	if !a.intents.end(req.Store, req.PID, time.Now()) {
		// Idempotent: a lapsed or never-begun window has nothing to end.
		writeJSON(rw, http.StatusOK, map[string]any{"store": req.Store, "ended": false})
		return
	}
	a.log.Info("restore finished", "event", EventRestoreEnd, "store", req.Store, "pid", req.PID, "result", req.Result)
	if w := a.worker(req.Store); w != nil {
		// Re-read the store now, so the restored generation becomes the
		// baseline at once rather than at the next reconcile.
		w.kick(time.Now())
	}
	writeJSON(rw, http.StatusOK, map[string]any{"store": req.Store, "ended": true})
}
