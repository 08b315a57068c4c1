package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/stateguard/stateguard/control"
)

// guardRoutes registers the guard's control routes:
//
//	POST /v1/guard/pause   GuardRequest → GuardAnswer
//	POST /v1/guard/resume  GuardRequest → GuardAnswer
func (a *Agent) guardRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/guard/pause", a.handleGuardPause)
	mux.HandleFunc("POST /v1/guard/resume", a.handleGuardResume)
}

func (a *Agent) handleGuardPause(w http.ResponseWriter, r *http.Request) {
	req, key, profile, ok := a.guardRequest(w, r)
	if !ok {
		return
	}
	d := control.DefaultGuardPause
	if req.For != "" {
		var err error
		if d, err = time.ParseDuration(req.For); err != nil || d <= 0 || d > control.MaxGuardPause {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("pause for %q: want a duration above 0 and at most %s (e.g. 15m)", req.For, control.MaxGuardPause))
			return
		}
	}
	p, st, err := a.PauseGuard(r.Context(), key, d, req.Reason)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, control.GuardAnswer{Store: key, Profile: profile, Guard: st, Pause: &p})
}

func (a *Agent) handleGuardResume(w http.ResponseWriter, r *http.Request) {
	_, key, profile, ok := a.guardRequest(w, r)
	if !ok {
		return
	}
	resumed, st, err := a.ResumeGuard(r.Context(), key)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, control.GuardAnswer{Store: key, Profile: profile, Guard: st, Resumed: resumed})
}

// guardRequest decodes a request and resolves its store among the stores
// the agent watches.
func (a *Agent) guardRequest(w http.ResponseWriter, r *http.Request) (req control.GuardRequest, key, profile string, ok bool) {
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("decode guard request: %w", err))
		return req, "", "", false
	}
	key, profile, err := a.resolveStore(req.Store, req.Profile, req.Home)
	if err != nil {
		code := http.StatusNotFound
		if errors.Is(err, errAmbiguousStore) {
			code = http.StatusConflict
		}
		writeErr(w, code, err)
		return req, "", "", false
	}
	return req, key, profile, true
}

var errAmbiguousStore = errors.New("ambiguous store")

// resolveStore finds the one watched store with path st, or with profile
// (default "default") in home (any home when empty).
func (a *Agent) resolveStore(st, profile, home string) (key, prof string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st != "" {
		if w := a.workers[filepath.Clean(st)]; w != nil {
			return w.st.Key(), w.st.Profile, nil
		}
		return "", "", fmt.Errorf("store %s is not watched (hint: agentctl status lists the watched stores)", st)
	}
	if profile == "" {
		profile = "default"
	}
	var found []string
	var foundProf string
	for _, w := range a.workers {
		if w.st.Profile == profile && (home == "" || filepath.Clean(w.st.Home) == filepath.Clean(home)) {
			found = append(found, w.st.Key())
			foundProf = w.st.Profile
		}
	}
	switch len(found) {
	case 1:
		return found[0], foundProf, nil
	case 0:
		where := "any watched home"
		if home != "" {
			where = "home " + home
		}
		return "", "", fmt.Errorf("no profile %q in %s (hint: agentctl status lists the watched stores)", profile, where)
	}
	return "", "", fmt.Errorf("%w: profile %q is in several homes (%s); name one with --home",
		errAmbiguousStore, profile, strings.Join(found, ", "))
}
