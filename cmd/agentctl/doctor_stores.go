package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/service"
	"github.com/stateguard/stateguard/store"
)

// checkStores looks at every store's files and directory the way agentd
// and Hermes need them: files 0600 and owned like their directory, the
// directory not writable by group or others.
func checkStores(stores []store.Store, problems []store.Problem) checkResult {
	r := checkResult{Name: "stores"}
	worst := statusOK
	// The top-level fix is the first one of the worst problem; every
	// detail carries its own.
	flag := func(s checkStatus, detail, fix string) {
		r.Details = append(r.Details, detail+"; fix: "+fix)
		if statusRank(s) > statusRank(worst) {
			worst, r.Fix = s, fix
		}
	}
	seenDir := map[string]bool{}
	present := 0
	for _, s := range stores {
		dir := s.Dir()
		dfi, err := os.Stat(dir)
		if err != nil {
			continue
		}
		if !seenDir[dir] {
			seenDir[dir] = true
			if perm := dfi.Mode().Perm(); perm&0o022 != 0 {
				flag(statusFail, fmt.Sprintf("directory %s has mode %04o: anyone can replace or delete the store, and agentd will not write captures into it", dir, perm),
					"chmod go-w "+dir)
			}
		}
		dirUID := fileid.Of(dfi).UID
		for _, p := range []string{s.Path, s.WALPath(), s.SHMPath()} {
			fi, err := os.Lstat(p)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			if p == s.Path {
				present++
			}
			switch perm := fi.Mode().Perm(); {
			case perm&0o022 != 0:
				flag(statusFail, fmt.Sprintf("%s has mode %04o: others can write the session store", p, perm), "chmod 600 "+p)
			case perm&0o044 != 0:
				flag(statusWarn, fmt.Sprintf("%s has mode %04o: others can read the session transcripts", p, perm), "chmod 600 "+p)
			}
			if uid := fileid.Of(fi).UID; uid >= 0 && dirUID >= 0 && uid != dirUID {
				flag(statusWarn, fmt.Sprintf("%s is owned by uid %d but its directory by uid %d: Hermes running as %d may fail to write it (a `sudo hermes` leftover?)", p, uid, dirUID, dirUID),
					fmt.Sprintf("chown %d %s (while Hermes is stopped)", dirUID, p))
			}
		}
	}
	for _, p := range problems {
		flag(statusWarn, p.Error(), firstNonEmpty(p.Hint, "see the path above"))
	}
	r.Status = worst
	switch {
	case len(stores) == 0:
		r.Summary = "no Hermes store found (set homes in the config if Hermes lives elsewhere)"
	case worst == statusOK:
		r.Summary = fmt.Sprintf("%d stores (%d exist yet): owners and modes are fine", len(stores), present)
	default:
		r.Summary = fmt.Sprintf("%d stores: %d problem(s)", len(stores), len(r.Details))
	}
	return r
}

func statusRank(s checkStatus) int {
	switch s {
	case statusWarn:
		return 1
	case statusFail:
		return 2
	}
	return 0
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// journalFacts is what the doctor reads from agentd's journal, read-only.
type journalFacts struct {
	path    string
	missing bool
	err     error
	failing []journal.Job
	// handled are the capture paths of resolved incidents.
	handled map[string]bool
	// lost are the unrecoverable incidents: their rows could not be
	// replayed, their raw files are kept.
	lost   []journal.Incident
	pauses []journal.GuardPause
}

// Jobs retried more often than this count as failing even while queued.
const maxHealthyAttempts = 3

// readJournal reads <stateDir>/journal.db through the journal's read-only
// open, which never creates, migrates or writes it (a diagnostic must not).
func readJournal(ctx context.Context, stateDir string, now time.Time) journalFacts {
	jf := journalFacts{path: filepath.Join(stateDir, journal.FileName), handled: map[string]bool{}}
	if stateDir == "" {
		jf.missing = true
		return jf
	}
	j, err := journal.OpenReadOnly(ctx, jf.path)
	if errors.Is(err, journal.ErrMissing) {
		jf.missing = true
		return jf
	}
	if err != nil {
		jf.err = err
		return jf
	}
	defer j.Close()
	jobs, err := j.ListJobs(ctx, journal.JobFilter{})
	if err != nil {
		jf.err = errors.Join(jf.err, fmt.Errorf("read replay jobs from %s: %w", jf.path, err))
	}
	for _, job := range jobs {
		if job.State == journal.JobFailed || (job.State != journal.JobDone && job.Attempts > maxHealthyAttempts) {
			jf.failing = append(jf.failing, job)
		}
	}
	incs, err := j.ListIncidents(ctx, journal.ListOptions{})
	if err != nil {
		jf.err = errors.Join(jf.err, fmt.Errorf("read incidents from %s: %w", jf.path, err))
	}
	for _, inc := range incs {
		if inc.State == journal.StateResolved && inc.Detail.CapturePath != "" {
			jf.handled[filepath.Clean(inc.Detail.CapturePath)] = true
		}
		if inc.State == journal.StateUnrecoverable {
			jf.lost = append(jf.lost, inc)
			if inc.Detail.CapturePath != "" {
				jf.handled[filepath.Clean(inc.Detail.CapturePath)] = true // listed by checkUnrecoverable
			}
		}
	}
	pauses, err := j.ActivePauses(ctx, now)
	if err != nil {
		jf.err = errors.Join(jf.err, fmt.Errorf("read guard pauses from %s: %w", jf.path, err))
	}
	jf.pauses = pauses
	return jf
}

const capturePrefix = ".retired-wal-"

// checkCaptures lists the Hermes-format captures next to each store whose
// rows were never replayed: every one not recorded as the capture of a
// resolved incident (Hermes' own captures are never in the journal).
func checkCaptures(stores []store.Store, jf journalFacts) checkResult {
	r := checkResult{Name: "captures"}
	var waiting, partial []string
	for _, s := range stores {
		entries, err := os.ReadDir(s.Dir())
		if err != nil {
			continue
		}
		prefix := filepath.Base(s.Path) + capturePrefix
		for _, e := range entries {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
				continue
			}
			p := filepath.Join(s.Dir(), e.Name())
			switch {
			case strings.HasSuffix(e.Name(), ".partial"):
				partial = append(partial, p)
			case !jf.handled[p]:
				waiting = append(waiting, p)
			}
		}
	}
	sort.Strings(waiting)
	sort.Strings(partial)
	for _, p := range waiting {
		r.Details = append(r.Details, "waiting: "+p)
	}
	for _, p := range partial {
		r.Details = append(r.Details, "interrupted (agentd removes its own when it starts, and Hermes' once the incident with the same orphan is captured): "+p)
	}
	switch {
	case len(waiting) == 0 && len(partial) == 0:
		r.Status, r.Summary = statusOK, "no capture waiting"
	default:
		r.Status = statusWarn
		r.Summary = fmt.Sprintf("%d capture(s) waiting, %d interrupted", len(waiting), len(partial))
		r.Fix = "see `agentctl incidents`; replay a capture's rows with `agentctl replay --capture DIR`, and delete it only after that"
	}
	if jf.err != nil && len(waiting) > 0 {
		r.Details = append(r.Details, "the journal could not be read, so captures already replayed are listed too")
	}
	return r
}

// checkUnrecoverable lists the incidents whose capture could not be used:
// what was lost and where the raw files are kept.
func checkUnrecoverable(jf journalFacts) checkResult {
	r := checkResult{Name: "unrecoverable incidents"}
	if len(jf.lost) == 0 {
		r.Status, r.Summary = statusOK, "none"
		return r
	}
	r.Status = statusFail
	r.Summary = fmt.Sprintf("%d incident(s) ended unrecoverable: rows were lost", len(jf.lost))
	for _, inc := range jf.lost {
		d := fmt.Sprintf("incident %s (%s) of %s: %s", inc.ID, inc.Kind, inc.Store, firstNonEmpty(inc.Detail.Error, "no reason recorded"))
		if sv := inc.Detail.Salvage; sv != nil {
			d += fmt.Sprintf(" [salvage: %d messages read, %d lost, %d pages unreadable, sessions %v]",
				sv.Messages, sv.LostMessages, sv.LostPages, sv.SessionsSeen)
		}
		r.Details = append(r.Details, d)
	}
	r.Fix = "keep the raw files named above; `agentctl incident ID` shows the steps, `agentctl export --capture DIR` reads what is left"
	return r
}

func checkReplayJobs(jf journalFacts) checkResult {
	r := checkResult{Name: "replay jobs"}
	switch {
	case jf.missing:
		r.Status, r.Summary = statusOK, "no journal yet ("+jf.path+"): agentd has not run with this state directory"
		return r
	case jf.err != nil:
		r.Status, r.Summary = statusWarn, fmt.Sprintf("cannot read the journal: %v", jf.err)
		r.Fix = "run agentctl doctor as root or as agentd's user"
		return r
	case len(jf.failing) == 0:
		r.Status, r.Summary = statusOK, "no replay job failing"
		return r
	}
	r.Status = statusFail
	r.Summary = fmt.Sprintf("%d replay job(s) failed or keep failing", len(jf.failing))
	for _, j := range jf.failing {
		r.Details = append(r.Details, fmt.Sprintf("job %d (%s, %d attempts) %s into %s: %s", j.ID, j.State, j.Attempts, j.Path, j.Store, firstNonEmpty(j.LastError, "no error recorded")))
	}
	r.Fix = "fix the cause in the last error, then run the replay again: `agentctl replay PATH --now` (replay is idempotent; `agentctl queue` lists the jobs)"
	return r
}

// checkGuard explains what the guard costs: it is what keeps a wrong
// "last connection" from unlinking a live WAL, and also what stops
// maintenance that needs to be a store's only holder.
func checkGuard(cfg *service.Config, jf journalFacts) checkResult {
	r := checkResult{Name: "guard"}
	if cfg.Guard != nil && !*cfg.Guard {
		r.Status = statusWarn
		r.Summary = "guard = false: a process that wrongly believes it is a store's last connection can checkpoint and unlink the WAL under a live writer"
		r.Fix = "set guard = true (pause it per store for maintenance instead)"
		return r
	}
	r.Status = statusOK
	r.Summary = "guard on: while guarded, `PRAGMA journal_mode=DELETE` and Hermes maintenance that requires no other holder cannot run; `agentctl guard off --profile P [--for 15m]` pauses it"
	for _, p := range jf.pauses {
		d := fmt.Sprintf("paused until %s: %s", p.Until.UTC().Format(time.RFC3339), p.Store)
		if p.Reason != "" {
			d += " (" + p.Reason + ")"
		}
		r.Details = append(r.Details, d)
	}
	return r
}
