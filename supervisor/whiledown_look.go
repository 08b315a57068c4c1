package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// downState is what the agent keeps of the look at start (whiledown.go):
// the positions the journal had when it started, and what the look could
// not decide, which status shows. Under Agent.mu.
type downState struct {
	positions map[string]journal.WALPosition
	warnings  map[string]string
}

// loadDownPositions reads the journaled positions once, at start.
func (a *Agent) loadDownPositions(ps map[string]journal.WALPosition) {
	a.mu.Lock()
	a.down.positions = ps
	a.mu.Unlock()
}

func (a *Agent) downPosition(path string) (journal.WALPosition, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.down.positions[path]
	return p, ok
}

// downWarn says in status (and the log, once) what the look could not
// decide, and the check an operator can run.
func (w *worker) downWarn(why string) {
	w.a.mu.Lock()
	if w.a.down.warnings == nil {
		w.a.down.warnings = map[string]string{}
	}
	w.a.down.warnings[w.st.Path] = why
	w.a.mu.Unlock()
	w.log.Warn("a change made while agentd was down cannot be told", "event", EventDownUndecided, "why", why, "hint", downHint(w.st.Path))
}

// downHint is the check an operator can run on a store the look could
// not decide about.
func downHint(path string) string {
	return fmt.Sprintf("with its writers stopped, run `sqlite3 -readonly %s 'PRAGMA integrity_check'` and compare its newest messages with what the writers acknowledged", path)
}

// lookWhileDown is the look at start: once per worker, on its first check
// that can read the store. It runs before the check's own rewrite and
// holder handling, so an incident it opens is taken by that same check.
func (w *worker) lookWhileDown() {
	if w.down.done {
		return
	}
	sf, ok, err := w.openStoreFiles()
	if err != nil {
		w.lookFailed(fmt.Errorf("the store's files could not be read: %w", err))
		return
	}
	if !ok {
		w.down.done = true // no main or no -wal: no live WAL to be mispaired
		return
	}
	defer sf.close(w.st.Path)
	if id, err := w.resumedOwnsWAL(sf.walSt.ID); err != nil {
		w.lookFailed(err)
		return
	} else if id != "" {
		// A previous agent's incident, resumed, still deals with the
		// -wal at the path (a mispaired or rewritten store's old -wal
		// waiting for its quarantine, which fits no main by design): its
		// own steps handle it.
		w.down.done = true
		w.log.Debug("not looked at for changes made while agentd was down: a resumed incident owns the -wal", "incident", id)
		return
	}
	rec, hasRec := w.a.downPosition(w.st.Path)
	if hasRec && rec.Main != sf.mainSt.ID {
		// Another main at the path: replaced or renamed aside (its
		// writers hold the old one, the holder scan finds them), not
		// rewritten in place.
		w.down.done = true
		w.rememberAsideMain(rec)
		return
	}
	known, _ := w.a.cache.Known(w.target)
	gen := w.readGeneration()
	for i := range known.Holders {
		if p := &known.Holders[i]; holdsStale(p, gen) && !w.owns(p.Ref()) {
			w.down.done = true // the check classifies those orphans
			return
		}
	}
	fit, err := sf.fit()
	if err != nil {
		w.lookFailed(fmt.Errorf("the WAL could not be compared with the main: %w", err))
		return
	}
	w.down.done = true
	w.log.Debug("looked at the store for changes made while agentd was down", "wal", fit.Cut.String(),
		"backfilled", fit.Backlog.Backfilled, "checks", fit.Checks, "mismatch", fit.Mismatch, "journaled", hasRec,
		"journaled_wal", fmt.Sprintf("frame %d of %08x-%08x, %d backfilled", rec.Frame, rec.Salt1, rec.Salt2, rec.Backfilled))
	evidence := fit.Mismatch
	sameWAL := hasRec && rec.WAL == sf.walSt.ID && rec.Salt1 == fit.Cut.Salt1 && rec.Salt2 == fit.Cut.Salt2 && rec.Frame <= fit.Cut.Frame
	counterBack := hasRec && sf.mainHdrReadable && sf.mainHdr.FileChangeCounter < rec.MainCounter
	if evidence == "" && sameWAL {
		evidence = rewrittenSince(rec, fit, sf, counterBack)
	}
	if evidence == "" {
		w.undecidedWhileDown(fit, rec, hasRec, counterBack, sf)
		return
	}
	w.rewrittenWhileDown(evidence, fit, rec, hasRec, sameWAL)
}

// rememberAsideMain makes the holder scans look for the main journaled
// before the stop, now that another is at the path: after `mv state.db
// state.db.old && cp BACKUP state.db` its writers hold it under a name
// that is no role of the store, next to the -wal at the path, and a
// fresh agent's cache never saw it. A scan finds a holder by a lock on
// such a main too, but not one whose POSIX locks were cancelled (a
// second fd on the file closed), while the journaled inode, told from
// a reused number by its birth, names it whatever the locks say. The
// targeted scan puts its holders in the cache before this check reads
// it, so the check classifies them (mispaired, replaced); the memory is
// then the scans' own: kept while a holder holds the inode.
func (w *worker) rememberAsideMain(rec journal.WALPosition) {
	if rec.MainBirth == 0 {
		return // no birth journaled: a number alone could be another file's
	}
	f := holders.KnownFile{Store: w.st.Path, Role: holders.RoleMain, ID: rec.Main, Birth: rec.MainBirth}
	w.a.cache.Remember(f)
	defer w.a.cache.ForgetFiles(f)
	sr, err := w.a.cache.Targeted(w.target)
	if err != nil {
		w.log.Warn("the main journaled before the stop was not looked for", "main", rec.Main, "err", err)
		return
	}
	for _, p := range sr.Holders {
		for _, h := range p.Files {
			if h.ID == rec.Main && !h.Current {
				w.log.Info("the main journaled before the stop is held off the path", "pid", p.Pid, "main", rec.Main, "path", h.HostPath)
			}
		}
	}
}

// resumedOwnsWAL names the unfinished incident of the store, if any,
// whose orphaned generation has the -wal now at the path, or that will
// quarantine it. Any other incident resumed at start (one that was
// replaying its rows, a sidecar_lost whose -wal is gone) leaves the files
// at the path to the look: a restore copied over them while agentd was
// down is as likely then as at any other stop.
func (w *worker) resumedOwnsWAL(wal fileid.ID) (string, error) {
	if len(w.liveIDs()) == 0 {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	incs, err := w.a.journal.ListIncidents(ctx, journal.ListOptions{OpenOnly: true, Store: w.st.Path})
	if err != nil {
		return "", fmt.Errorf("the store's unfinished incidents could not be read: %w", err)
	}
	for _, inc := range incs {
		if g := inc.Detail.OldGeneration; g != nil && g.WAL.ID == wal {
			return inc.ID, nil
		}
		for _, id := range inc.Detail.Quarantine {
			if id == wal {
				return inc.ID, nil
			}
		}
	}
	return "", nil
}

// lookFailed counts a look that could not read the store; the next
// check (a held store is checked at every reconcile) looks again, up to
// maxLookTries, and then status says it was never looked at.
func (w *worker) lookFailed(err error) {
	w.down.tries++
	if w.down.tries < maxLookTries {
		w.log.Info("store not looked at for changes made while agentd was down; looked at again at the next check", "err", err)
		return
	}
	w.down.done = true
	w.downWarn(err.Error())
}

// undecidedWhileDown warns when the main changed while agentd was down
// in a way no checkpoint explains (its change counter went back), but the
// WAL can no longer show whether its writers were left on the old
// content: reset since (new salts) or empty. A main that merely changed
// under a WAL restarted since is what any checkpoint leaves: no warning.
func (w *worker) undecidedWhileDown(fit store.WALFit, rec journal.WALPosition, hasRec, counterBack bool, sf storeFiles) {
	if !hasRec {
		return // nothing recorded to say the main changed: the checks that ran passed
	}
	switch {
	case counterBack && fit.Cut.Frame == 0:
		w.downWarn(fmt.Sprintf("the main's change counter went back from %d to %d while agentd was down, and the WAL has no committed frame left to compare",
			rec.MainCounter, sf.mainHdr.FileChangeCounter))
	case counterBack:
		w.downWarn(fmt.Sprintf("the main's change counter went back from %d to %d while agentd was down, and the WAL was restarted since (salts %08x-%08x, journaled %08x-%08x)",
			rec.MainCounter, sf.mainHdr.FileChangeCounter, fit.Cut.Salt1, fit.Cut.Salt2, rec.Salt1, rec.Salt2))
	}
}

// rewrittenWhileDown freezes every writer of the store the first scan
// found and hands a rewritten incident to the check (openRewrites), cut
// at the journaled position when the WAL is still the one it names.
func (w *worker) rewrittenWhileDown(evidence string, fit store.WALFit, rec journal.WALPosition, hasRec, sameWAL bool) {
	now := time.Now()
	known, _ := w.a.cache.Known(w.target)
	frozen := w.freezeWriters(known.Holders, 0, now)
	found := &foundWhileDown{evidence: "found at start: " + evidence, since: time.Unix(0, 0).UTC()}
	var cut *store.WALCut
	switch {
	case sameWAL:
		cut = &store.WALCut{Frame: rec.Frame, Salt1: rec.Salt1, Salt2: rec.Salt2}
		found.since = rec.At
	case hasRec:
		found.since = rec.At // the WAL restarted since: all of it is newer
	default:
		found.evidence += "; no position was journaled: every row the live store lacks is replayed"
	}
	w.log.Warn("the live WAL does not fit the main: rewritten while agentd was down", "event", EventRewriteDetected,
		"pid", 0, "frozen", len(frozen), "confirmed", true, "evidence", evidence, "wal", fit.Cut.String())
	w.pendRewrite(rewriteSeen{at: now, frozen: frozen, confirmed: true, cut: cut, found: found}) // writer pid 0: none named
}

// foundWhileDown is what a rewrite found at start tells its incident.
type foundWhileDown struct {
	evidence string
	since    time.Time // the change happened after it
}

// foundAtStart is, for an incident the first check opens from its holder
// scan (a main replaced or renamed aside while no agent ran), what it
// was found by and the journaled position to cut at, when the orphans'
// WAL is the one it names. ok is false for any later check.
func (w *worker) foundAtStart(orphans []holders.Process, hadGen bool) (found *foundWhileDown, cut *store.WALCut) {
	if hadGen {
		return nil, nil
	}
	found = &foundWhileDown{since: time.Unix(0, 0).UTC()}
	rec, hasRec := w.a.downPosition(w.st.Path)
	var ev string
	for _, p := range orphans {
		for _, f := range p.Files {
			if f.Role == holders.RoleMain && !f.Current {
				ev += fmt.Sprintf("pid %d holds main %s, no longer at the path; ", p.Pid, f.ID)
			}
			if f.Role == holders.RoleWAL {
				where := "unlinked or elsewhere"
				if f.Current {
					where = "at the path"
				}
				ev += fmt.Sprintf("pid %d holds -wal %s, %s; ", p.Pid, f.ID, where)
				if hasRec && f.ID == rec.WAL && cut == nil {
					cut = &store.WALCut{Frame: rec.Frame, Salt1: rec.Salt1, Salt2: rec.Salt2}
				}
			}
		}
	}
	if hasRec {
		found.since = rec.At
	}
	found.evidence = "found at start: " + ev
	if cut == nil {
		found.evidence += "no journaled position of that WAL: cut by time"
	} else {
		found.evidence += "cut at the position journaled at " + rec.At.Format(time.RFC3339Nano)
	}
	return found, cut
}

// downProblems are the look's undecided stores, as status problems.
func (a *Agent) downProblems() []store.Problem {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ps []store.Problem
	for path, why := range a.down.warnings {
		ps = append(ps, store.Problem{Path: path, Err: errors.New(why), Hint: downHint(path)})
	}
	slices.SortFunc(ps, func(x, y store.Problem) int { return strings.Compare(x.Path, y.Path) })
	return ps
}

// rewrittenSince compares the main with the position journaled before
// the agent stopped, when the live WAL is still the one it names: only a
// checkpoint writes a WAL store's main, and a checkpoint that copied
// frames moves the backfill mark. A main of another size or page 1 with
// the mark where it was was written by something else.
func rewrittenSince(rec journal.WALPosition, fit store.WALFit, sf storeFiles, counterBack bool) string {
	at := rec.At.Format(time.RFC3339Nano)
	switch {
	case counterBack:
		return fmt.Sprintf("the main's change counter went back from %d (journaled at %s) to %d under the same live WAL",
			rec.MainCounter, at, sf.mainHdr.FileChangeCounter)
	case fit.Backlog.Backfilled != rec.Backfilled:
		return "" // checkpointed since: the content checks had their say
	case fit.Page1InWAL:
		// A checkpoint copied page 1 from this WAL: the last closer's,
		// whose wal-index the next opener rebuilt (backfill mark 0)
		// from a WAL kept in place (PERSIST_WAL).
		return ""
	case sf.mainSt.Size != rec.MainSize:
		return fmt.Sprintf("the main is %d bytes, %d when journaled at %s, and no checkpoint of its live WAL (%s, %d frames backfilled) ran since",
			sf.mainSt.Size, rec.MainSize, at, fit.Cut, rec.Backfilled)
	case sf.mainPage1 != rec.MainPage1:
		return fmt.Sprintf("the main's page 1 is not the one journaled at %s, and no checkpoint of its live WAL (%s, %d frames backfilled) ran since",
			at, fit.Cut, rec.Backfilled)
	}
	return ""
}
