package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// The control API, served on the unix socket; package control lists the
// routes and owns their types. Every answer is JSON; an error is
// {"error": "..."} with a 4xx/5xx status.
func (a *Agent) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", a.handleStatus)
	mux.HandleFunc("GET /v1/incidents", a.handleIncidents)
	mux.HandleFunc("GET /v1/incidents/{id}", a.handleIncident)
	mux.HandleFunc("POST /v1/incidents/{id}/release", a.handleRelease)
	mux.HandleFunc("GET /v1/jobs", a.handleJobs)
	mux.HandleFunc("POST /v1/jobs", a.handleEnqueue)
	a.guardRoutes(mux)
	a.restoreRoutes(mux) // intent.go
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeErr(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func (a *Agent) handleStatus(w http.ResponseWriter, r *http.Request) {
	st, err := a.Status(r)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// Status is the daemon's view: the stores it watches with the last holder
// scan, and their incidents and replay jobs from the journal.
func (a *Agent) Status(r *http.Request) (control.Status, error) {
	ctx := r.Context()
	a.mu.Lock()
	stores := make([]store.Store, 0, len(a.workers))
	for _, w := range a.workers {
		stores = append(stores, w.st)
	}
	for _, s := range a.pending {
		stores = append(stores, s)
	}
	problems := a.problems
	a.mu.Unlock()
	problems = append(slices.Clip(problems), a.downProblems()...)
	sort.Slice(stores, func(i, j int) bool { return stores[i].Path < stores[j].Path })
	st := control.BuildStatus(stores, problems, a.cache.Last())
	st.Daemon = control.DaemonStatus{Running: true, PID: os.Getpid(), StartedAt: a.started.UTC(), StateDir: a.opts.StateDir, Socket: a.SocketPath()}
	incs, err := a.journal.ListIncidents(ctx, journal.ListOptions{OpenOnly: true})
	if err != nil {
		return st, err
	}
	// Unrecoverable incidents are over, but their loss and raw files
	// stay an operator's business: status keeps showing them.
	lost, err := a.journal.ListIncidents(ctx, journal.ListOptions{State: journal.StateUnrecoverable})
	if err != nil {
		return st, err
	}
	incs = append(incs, lost...)
	jobs, err := a.journal.ListJobs(ctx, journal.JobFilter{})
	if err != nil {
		return st, err
	}
	for _, j := range jobs {
		switch j.State {
		case journal.JobQueued:
			st.Queue.Queued++
		case journal.JobRunning:
			st.Queue.Running++
		case journal.JobFailed:
			st.Queue.Failed++
		case journal.JobDone:
			st.Queue.Done++
		}
	}
	for i := range st.Stores {
		ss := &st.Stores[i]
		ss.Guard = a.guardStatus(ss.Key)
		for _, inc := range incs {
			if inc.Store == ss.Key {
				ss.Incidents = append(ss.Incidents, control.IncidentSummary{ID: inc.ID, Kind: inc.Kind, State: inc.State,
					Policy: inc.Policy, OpenedAt: inc.OpenedAt, Capture: inc.Detail.CapturePath, Error: inc.Detail.Error})
			}
		}
		for _, j := range jobs {
			if j.Store == ss.Key && (j.State == journal.JobQueued || j.State == journal.JobRunning) {
				ss.QueuedReplays++
			}
		}
	}
	return st, nil
}

func (a *Agent) handleIncidents(w http.ResponseWriter, r *http.Request) {
	incs, err := a.journal.ListIncidents(r.Context(), journal.ListOptions{OpenOnly: r.URL.Query().Get("all") == ""})
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	if incs == nil {
		incs = []journal.Incident{}
	}
	writeJSON(w, http.StatusOK, incs)
}

func (a *Agent) handleIncident(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	inc, err := a.journal.GetIncident(r.Context(), id)
	if errors.Is(err, journal.ErrIncidentNotFound) {
		writeErr(w, http.StatusNotFound, fmt.Errorf("no incident %s (hint: agentctl incidents --all lists them)", id))
		return
	}
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	steps, err := a.journal.Steps(r.Context(), id)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, control.IncidentView{Incident: inc, Steps: steps})
}

func (a *Agent) handleRelease(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req control.ReleaseRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("decode release request: %w", err))
		return
	}
	switch req.How {
	case incident.PolicyResume, incident.PolicyTerminate, incident.PolicyKill:
	default:
		writeErr(w, http.StatusBadRequest, fmt.Errorf("release how %q: want resume, terminate or kill", req.How))
		return
	}
	inc, err := a.journal.GetIncident(r.Context(), id)
	if err != nil {
		writeErr(w, http.StatusNotFound, fmt.Errorf("no incident %s", id))
		return
	}
	wk := a.worker(inc.Store)
	if wk == nil {
		writeErr(w, http.StatusConflict, fmt.Errorf("incident %s: store %s is not watched", id, inc.Store))
		return
	}
	var relErr error
	if err := wk.do(r.Context(), func() { relErr = wk.engine().Release(id, req.How) }); err != nil {
		writeErr(w, http.StatusServiceUnavailable, err)
		return
	}
	if relErr != nil {
		writeErr(w, http.StatusConflict, relErr)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"incident": id, "released": req.How, "at": time.Now().UTC()})
}

func (a *Agent) handleJobs(w http.ResponseWriter, r *http.Request) {
	jobs, err := a.journal.ListJobs(r.Context(), journal.JobFilter{})
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	if jobs == nil {
		jobs = []journal.Job{}
	}
	writeJSON(w, http.StatusOK, jobs)
}
