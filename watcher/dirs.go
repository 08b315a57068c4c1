package watcher

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/fsnotify/fsnotify"

	"github.com/stateguard/stateguard/fileid"
)

// dirState is what the watcher knows of one watched directory.
type dirState struct {
	watched bool
	id      fileid.ID // identity of the directory when its watch was added (not its FileInfo: 10,000 of those were 3 MB)
	errText string    // last error reported for it, so each is reported once
	limited bool      // not watched: the watch limit was reached
}

// refresh makes the watch on d match what is at d now, and reports whether
// it changed (armed, lost or replaced). watching, when not nil, is the
// set of paths fsnotify still watches, to catch a watch the kernel dropped
// without an event. w.mu is held.
func (w *Watcher) refresh(d string, st *dirState, watching map[string]bool) (bool, error) {
	if w.fsw == nil {
		return false, nil
	}
	// Stat before Add: if d is replaced in between, the recorded identity
	// is the old one and the next refresh re-arms, never the reverse.
	fi, err := os.Stat(d)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if st.watched {
			w.disarm(d, st)
			return true, nil
		}
		st.errText = ""
		return false, nil
	case err != nil:
		return false, w.fail(d, st, fmt.Errorf("stat watched directory %s: %w", d, err))
	case !fi.IsDir():
		was := st.watched
		w.disarm(d, st)
		return was, w.fail(d, st, fmt.Errorf("watch %s: not a directory; changes in it are only seen by reconciles", d))
	}
	id := fileid.Of(fi).ID
	if st.watched && !id.IsZero() && id == st.id && (watching == nil || watching[d]) {
		return false, nil
	}
	replaced := st.watched
	if st.watched {
		w.disarm(d, st)
	}
	if err := w.add(d); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return replaced, nil
		}
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EMFILE) {
			// Out of watches: counted and said once for all
			// directories (limitReport), never one line each.
			st.limited = true
			return replaced, nil
		}
		return replaced, w.fail(d, st, fmt.Errorf("watch %s (check permissions and fs.inotify.max_user_watches): %w", d, err))
	}
	st.watched, st.id, st.errText, st.limited = true, id, "", false
	return true, nil
}

// fail records err for d and returns it, or nil when it was already
// reported, so a persistent failure is not repeated at every reconcile.
func (w *Watcher) fail(d string, st *dirState, err error) error {
	if st.errText == err.Error() {
		return nil
	}
	st.errText = err.Error()
	w.log.Warn("directory not watched", "path", d, "err", err)
	return err
}

func (w *Watcher) disarm(d string, st *dirState) {
	if !st.watched {
		return
	}
	st.watched, st.id = false, fileid.ID{}
	// The kernel may have dropped the watch already (directory deleted).
	if err := w.fsw.Remove(d); err != nil && !errors.Is(err, fsnotify.ErrNonExistentWatch) && !errors.Is(err, fsnotify.ErrClosed) {
		w.log.Debug("remove watch", "path", d, "err", err)
	}
}

// dirChange is one directory whose watch changed while refreshing.
type dirChange struct {
	path    string
	watched bool // state after the change
}

// dirErr is a directory that exists but could not be watched.
type dirErr struct {
	path string
	err  error
}

// refreshTree refreshes d and every watched directory below it: when d
// goes or comes back, so do they, and a child created before its parent's
// watch was re-armed has sent no event.
func (w *Watcher) refreshTree(d string) ([]dirChange, []dirErr) {
	r := w.routes.Load()
	var changes []dirChange
	var errs []dirErr
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, nil
	}
	prefix := d + string(os.PathSeparator)
	for _, p := range r.dirs { // parents first
		if p != d && !strings.HasPrefix(p, prefix) {
			continue
		}
		st := w.dirs[p]
		if st == nil {
			continue
		}
		changed, err := w.refresh(p, st, nil)
		if err != nil {
			errs = append(errs, dirErr{p, err})
		}
		if changed {
			changes = append(changes, dirChange{p, st.watched})
		}
	}
	return changes, errs
}

// refreshAll re-checks the directory watches for reconciles, so a missed
// event costs one interval, not a blind spot: every directory's watch
// against the kernel's list, a directory not watched (retrying its
// watch), and with full (or on its turn, 1/auditEvery of the directories
// each time) what is at its path, to catch a directory replaced without
// an event. At 10,000 stores a stat of every directory at every tick was
// a sizeable part of an idle agent's CPU. It returns the directories
// whose watch changed (re-armed or lost) and those that could not be
// watched.
func (w *Watcher) refreshAll(full bool) ([]dirChange, []dirErr) {
	if w.fsw == nil {
		return nil, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, nil
	}
	return w.refreshAllLocked(full)
}

// auditEvery is how many tick reconciles it takes to stat every watched
// directory once (refreshAll).
const auditEvery = 30

// refreshAllLocked is refreshAll with w.mu held.
func (w *Watcher) refreshAllLocked(full bool) ([]dirChange, []dirErr) {
	r := w.routes.Load()
	turn := w.ticks % auditEvery
	w.ticks++
	// The kernel drops a watch without an event fsnotify passes on
	// (IN_IGNORED, IN_UNMOUNT): fsnotify then lists one watch fewer than
	// the directories taken for watched. Only then, at a full refresh,
	// and once a round of audits, is every directory looked up in its
	// list: a 10,000-entry set built at every tick was a tenth of an
	// idle agent's CPU.
	var watching map[string]bool
	if list := w.fsw.WatchList(); full || turn == 0 || len(list) != w.watchedCount() {
		watching = make(map[string]bool, len(list))
		for _, p := range list {
			watching[p] = true
		}
	}
	var changes []dirChange
	var errs []dirErr
	limited := 0 // never skipped below: a directory out of watches is not watched
	for i, p := range r.dirs {
		st := w.dirs[p]
		if st == nil {
			continue
		}
		if !full && st.watched && (watching == nil || watching[p]) && i%auditEvery != turn {
			continue
		}
		changed, err := w.refresh(p, st, watching)
		if err != nil {
			errs = append(errs, dirErr{p, err})
		}
		if changed {
			changes = append(changes, dirChange{p, st.watched})
		}
		if st.limited && !st.watched {
			limited++
		}
	}
	w.reportLimited(limited, len(r.dirs))
	return changes, errs
}

// watchedCount is how many directories are taken for watched. w.mu is
// held.
func (w *Watcher) watchedCount() int {
	n := 0
	for _, st := range w.dirs {
		if st.watched {
			n++
		}
	}
	return n
}

// limitReport says, once per change in the count, how many directories
// are left unwatched by the kernel's watch limit. w.mu is held.
func (w *Watcher) limitReport(r *routes) {
	n := 0
	for _, d := range r.dirs {
		if st := w.dirs[d]; st != nil && st.limited && !st.watched {
			n++
		}
	}
	w.reportLimited(n, len(r.dirs))
}

// reportLimited is limitReport with the count of directories out of
// watches (n) made by the caller, of needed in all. w.mu is held.
func (w *Watcher) reportLimited(n, needed int) {
	if n == w.limited {
		return
	}
	w.limited = n
	if n == 0 {
		w.log.Info("every directory is watched again", "event", EventWatchLimit, "unwatched", 0)
		return
	}
	w.log.Error("watch limit reached: some store directories are not watched", "event", EventWatchLimit,
		"unwatched", n, "needed", needed, "limit", watchLimit(), "hint", limitHint)
}
