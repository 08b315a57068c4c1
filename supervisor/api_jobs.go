package supervisor

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
)

func (a *Agent) handleEnqueue(w http.ResponseWriter, r *http.Request) {
	var req control.JobRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("decode job request: %w", err))
		return
	}
	if !filepath.IsAbs(req.Path) || !filepath.IsAbs(req.Store) {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("job: path %q and store %q must be absolute", req.Path, req.Store))
		return
	}
	// Resolved once, here: the job names the file the operator meant
	// now, whatever a link on the way points to by the time it runs.
	resolved, err := recovery.ResolveOperatorInput(req.Path)
	if err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("job: %s is not a readable regular file (hint: agentd reads it, as %d): %w", req.Path, os.Geteuid(), err))
		return
	}
	req.Path = resolved
	if a.worker(req.Store) == nil {
		writeErr(w, http.StatusNotFound, fmt.Errorf("job: %s is not a store agentd watches (hint: agentctl status lists them; use --now to replay without the daemon)", req.Store))
		return
	}
	job, err := a.journal.EnqueueJob(r.Context(), journal.Job{Store: req.Store, Path: req.Path, SessionID: req.SessionID})
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	a.log.Info("replay queued by an operator", "event", incident.EventReplayQueued, "job", job.ID, "store", req.Store, "path", req.Path)
	writeJSON(w, http.StatusAccepted, job)
}
