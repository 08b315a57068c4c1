package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// finish ends the run: let every incident and replay job finish, check
// that nothing is left stopped or pinned, stop everything, and check every
// store against the acks.
func (r *run) finish(ctx context.Context, stopWriters func()) {
	r.log.Info("cycles done; waiting for incidents and replays", "bound", r.cfg.Settle)
	upCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	if err := r.agent.waitUp(upCtx); err != nil {
		r.problem("agentd not running at the end of the cycles: %v", err)
	}
	cancel()
	// An orphan the watcher missed is found by the next reconcile at the
	// latest: give agentd two before deciding there is nothing left.
	sleepCtx(ctx, 2*r.cfg.Reconcile)
	if left := r.settle(ctx, r.cfg.Settle); left != "" {
		r.log.Warn("not settled with the writers running", "left", left)
	}
	r.checkStopped()
	stopWriters()
	if left := r.settle(ctx, time.Minute); left != "" {
		r.log.Warn("not settled after the writers stopped", "left", left)
	}
	r.checkPinned(ctx)
	for _, p := range r.e.profiles {
		r.pruneOperatorFiles(ctx, p)
	}
	r.collect(ctx)
	r.wg.Wait()
	r.parseLogs()
	if err := r.agent.stop(45 * time.Second); err != nil {
		r.problem("%v", err)
	}
	r.agent.closeFDStore()
	r.mu.Lock()
	r.rep.AgentRestarts = r.agent.restarts
	r.rep.AgentCrashes = r.agent.crashes
	for _, s := range r.slots {
		s.mu.Lock()
		for why, n := range s.exits {
			r.rep.WriterExits[why] += n
		}
		s.mu.Unlock()
	}
	r.mu.Unlock()
	r.verifyStores()
}

// settle waits up to bound until agentd is up with no open incident and
// no queued or running replay job; it returns what is left, "" when
// settled.
func (r *run) settle(ctx context.Context, bound time.Duration) string {
	deadline := time.Now().Add(bound)
	left := "agentd not running"
	for time.Now().Before(deadline) {
		if r.agent.isUp() {
			incs, ierr := r.agent.incidents(ctx, false)
			jobs, jerr := r.agent.jobs(ctx)
			if ierr == nil && jerr == nil {
				pending := 0
				for _, j := range jobs {
					if pendingJob(j.State) {
						pending++
					}
				}
				if len(incs) == 0 && pending == 0 {
					return ""
				}
				left = fmt.Sprintf("%d open incidents, %d pending replay jobs", len(incs), pending)
			}
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return "interrupted"
		}
	}
	return left
}

// checkStopped looks for writers (and agentd) left in the stopped state
// once every incident is over.
func (r *run) checkStopped() {
	check := func(what string, pid int) {
		if pid == 0 {
			return
		}
		st, err := hermestest.ProcState(pid)
		if err != nil {
			if errors.Is(err, hermestest.ErrNoProc) {
				r.rep.StoppedUnknown = err.Error()
			}
			return
		}
		if stoppedState(st) {
			r.rep.Stopped = append(r.rep.Stopped, fmt.Sprintf("%s pid %d state %c", what, pid, st))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.slots {
		check("writer "+s.name, s.pid())
	}
	check("agentd", r.agent.pid())
}

// checkPinned waits (bounded) for agentd to hold no fd on a deleted inode
// under the home: such an fd is a capture, pin or guard left behind.
func (r *run) checkPinned(ctx context.Context) {
	pid := r.agent.pid()
	if pid == 0 {
		r.problem("pinned check skipped: agentd not running")
		return
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		fds, err := deletedFds(pid, r.e.home)
		if err != nil {
			r.mu.Lock()
			r.rep.PinnedUnknown = err.Error()
			r.mu.Unlock()
			return
		}
		// Pins agentd kept in the service manager's store outlive it:
		// with every incident settled, none may be left there either.
		for _, name := range r.agent.fds.Names() {
			fds = append(fds, "service manager's fd store: "+name)
		}
		if len(fds) == 0 {
			return
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 250*time.Millisecond) {
			r.mu.Lock()
			r.rep.Pinned = fds
			r.mu.Unlock()
			return
		}
	}
}

// collect reads every incident and job from the control API.
func (r *run) collect(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	incs, err := r.agent.incidents(ctx, true)
	if err != nil {
		r.problem("incidents not read from the control API: %v", err)
		r.rep.Unresolved = -1
		return
	}
	jobs, err := r.agent.jobs(ctx)
	if err != nil {
		r.problem("replay jobs not read from the control API: %v", err)
	}
	r.incidentsAll, r.incidentsRead = incs, true
	for _, in := range incs {
		r.rep.Incidents[in.Kind]++
		if in.Detail.DivertDir != "" {
			r.rep.ReplayIntegrated = true
		}
		switch {
		case givenUp(in.State):
			r.rep.IncidentsFailed++
			r.problem("incident %s (%s, %s) %s: %s", in.ID, in.Kind, in.Profile, in.State, in.Detail.Error)
		case !terminalIncident(in.State):
			r.rep.Unresolved++
			r.problem("incident %s (%s, %s) unresolved in state %s: %s", in.ID, in.Kind, in.Profile, in.State, in.Detail.Error)
		}
		if !in.ResolvedAt.IsZero() {
			took := in.ResolvedAt.Sub(in.OpenedAt)
			r.rep.MaxResolution = max(r.rep.MaxResolution, took)
			if took >= goalResolution && r.saidDiskFull(ctx, in) {
				r.rep.DiskFullSlow++
			} else {
				r.rep.MaxResolutionSteady = max(r.rep.MaxResolutionSteady, took)
			}
		}
	}
	for _, j := range jobs {
		r.rep.ReplayIntegrated = true
		if j.Result != nil {
			r.rep.Recovered += j.Result.Appended
		}
		switch {
		case j.State == "failed":
			r.rep.JobsFailed++
			r.problem("replay job %d of incident %s failed: %s", j.ID, j.IncidentID, j.LastError)
		case pendingJob(j.State):
			r.rep.JobsPending++
		}
	}
}

// saidDiskFull reports whether the incident said, in its error or in a
// needs_action step, that it waited for disk space.
func (r *run) saidDiskFull(ctx context.Context, in apiIncident) bool {
	if mentionsDiskFull(in.Detail.Error) {
		return true
	}
	var v struct {
		Steps []struct {
			Name   string         `json:"name"`
			Detail map[string]any `json:"detail"`
		} `json:"steps"`
	}
	if err := r.agent.get(ctx, "/v1/incidents/"+in.ID, &v); err != nil {
		return false
	}
	for _, st := range v.Steps {
		if msg, _ := st.Detail["error"].(string); st.Name == "needs_action" && mentionsDiskFull(msg) {
			return true
		}
	}
	return false
}

func mentionsDiskFull(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "disk full") || strings.Contains(m, "no space") || strings.Contains(m, "max_bytes")
}

// verifyStores checks every profile's healthy store against its acks.
func (r *run) verifyStores() {
	work := filepath.Join(r.e.root, "verify")
	for _, p := range r.e.profiles {
		pr, err := checkProfile(p, r.slots, r.acks, r.judgeFor(p), work)
		r.mu.Lock()
		if err != nil {
			r.problem("profile %s not checked: %v", p.name, err)
			r.rep.CorruptStores++
		}
		r.addProfile(pr)
		if err == nil && pr.Integrity != "ok" {
			r.rep.CorruptStores++
			r.problem("profile %s: %s", p.name, clip(pr.Integrity))
			r.log.Warn("store corrupt", "profile", p.name, "integrity", pr.Integrity)
		}
		if pr.Lost > 0 {
			r.problem("profile %s: %d of %d required rows lost (last restore %s), e.g. %s", p.name, pr.Lost, pr.Required,
				unixString(pr.LastRestore), strings.Join(pr.LostSamples, ", "))
		}
		if pr.LostEarlier > 0 {
			r.problem("profile %s: %d rows acknowledged before a backup began are in no later backup nor the store, e.g. %s",
				p.name, pr.LostEarlier, strings.Join(pr.LostEarlierSamples, ", "))
		}
		if pr.DuringLost > 0 {
			r.problem("profile %s: %d rows committed while a restore tool wrote the store are missing and no incident was opened, e.g. %s",
				p.name, pr.DuringLost, strings.Join(pr.DuringLostSamples, ", "))
		}
		for _, s := range pr.ResurrectedSamples {
			r.log.Info("rolled-back row replayed back", "profile", p.name, "row", s)
		}
		if len(pr.Leftovers) > 0 {
			r.problem("profile %s: left in the profile directory: %s", p.name, strings.Join(pr.Leftovers, ", "))
		}
		r.mu.Unlock()
	}
}

// addProfile adds one profile's counts to the run's; callers hold r.mu.
func (r *run) addProfile(pr ProfileReport) {
	r.rep.PerProfile = append(r.rep.PerProfile, pr)
	r.rep.Acked += pr.Acked
	r.rep.Required += pr.Required
	r.rep.Lost += pr.Lost
	r.rep.Duplicated += pr.Duplicated
	r.rep.RolledBack += pr.RolledBack
	r.rep.Resurrected += pr.Resurrected
	r.rep.OrphanReplayed += pr.OrphanReplayed
	for k, n := range pr.ResurrectedBy {
		if r.rep.ResurrectedBy == nil {
			r.rep.ResurrectedBy = map[string]int{}
		}
		r.rep.ResurrectedBy[k] += n
	}
	r.rep.LostEarlier += pr.LostEarlier
	r.rep.AckedAfterRolledBack += pr.AckedAfterRolledBack
	r.rep.StraddleKept += pr.StraddleKept
	r.rep.NotRolledBack += pr.NotRolledBack
	for k, n := range pr.NotRolledBackBy {
		if r.rep.NotRolledBackBy == nil {
			r.rep.NotRolledBackBy = map[string]int{}
		}
		r.rep.NotRolledBackBy[k] += n
	}
	r.rep.Unverifiable += pr.Unverifiable
	r.rep.DuringTool += pr.DuringTool
	r.rep.DuringMissing += pr.DuringMissing
	r.rep.DuringRolledBack += pr.DuringRolledBack
	r.rep.DuringLost += pr.DuringLost
	r.rep.Leftovers += len(pr.Leftovers)
}

// judgeFor is what the run knows of p's incidents and agentd's uptime,
// for checkProfile.
func (r *run) judgeFor(p *profile) judge {
	if !r.incidentsRead {
		// Interrupted chaos runs read no incident: every backup
		// looked settled and no tool noticed, so rows still on their
		// way to a replay, and rows an incident salvaged, were counted
		// lost (280 and 29 on seed 1).
		return judge{unknown: true, settled: func(time.Time) bool { return false },
			failed: func(*writerSlot, time.Time) bool { return false }, noticed: func(restore) bool { return false }}
	}
	settled := func(t time.Time) bool {
		if !r.agent.upSince(t, 2*time.Second) {
			return false
		}
		for _, in := range r.incidentsAll {
			// A failed incident never replays: it excuses nothing.
			if in.Store == p.db && !givenUp(in.State) && !in.OpenedAt.After(t.Add(time.Second)) && (in.ResolvedAt.IsZero() || in.ResolvedAt.After(t)) {
				return false
			}
		}
		return true
	}
	var lives []procLife
	for _, in := range r.incidentsAll {
		if in.Store != p.db || !givenUp(in.State) {
			continue
		}
		for _, h := range in.Detail.Holders {
			for _, s := range r.slots {
				if l, ok := s.lifeOf(h.PID, in.OpenedAt); ok && s.p == p {
					lives = append(lives, l)
				}
			}
		}
	}
	failed := func(s *writerSlot, seen time.Time) bool {
		for _, l := range lives {
			// The watcher sees an ack up to one poll after it is
			// written, and the exit is seen after the last ack.
			if _, ok := s.lifeOf(l.pid, l.start); ok && !seen.Before(l.start) && (l.end.IsZero() || !seen.After(l.end.Add(250*time.Millisecond))) {
				return true
			}
		}
		return false
	}
	noticed := func(rs restore) bool {
		return incidentAround(r.incidentsAll, p.db, rs.Start, r.agent.upAfter(rs.At))
	}
	opened := func(id string) (time.Time, bool) {
		for _, in := range r.incidentsAll {
			if in.ID == id && in.Store == p.db {
				return in.OpenedAt, true
			}
		}
		return time.Time{}, false
	}
	return judge{settled: settled, failed: failed, noticed: noticed, opened: opened}
}

// incidentAround reports whether an incident of db was opened from a
// second before from to noticeWithin after to: agentd saw the tool. A
// later fault's incident can fall in the window too; the window is short
// so it rarely does, and the check errs towards "noticed".
func incidentAround(incs []apiIncident, db string, from, to time.Time) bool {
	for _, in := range incs {
		if in.Store == db && !in.OpenedAt.Before(from.Add(-time.Second)) && !in.OpenedAt.After(to.Add(noticeWithin)) {
			return true
		}
	}
	return false
}

// noticeWithin bounds how long after a tool finished (or agentd came
// back up) an incident still counts as the tool's: a reconcile and a
// settle.
const noticeWithin = 3 * time.Second

func unixString(sec float64) string {
	if sec == 0 {
		return "none"
	}
	return time.Unix(0, int64(sec*1e9)).UTC().Format("15:04:05.000000")
}
