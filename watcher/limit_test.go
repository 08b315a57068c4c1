package watcher

import (
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// Out of inotify watches, the watcher watches what it can, says so in
// one watch.limit line (not one per directory) with a hint, and watches
// the rest once watches are free again, at its next reconcile.
func TestWatchLimitReportedOnce(t *testing.T) {
	var logs hermestest.LogBuffer
	w := start(t, Config{Reconcile: -1, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	real, budget := w.add, 3
	w.add = func(d string) error {
		if budget == 0 {
			return fmt.Errorf("add watch: %w", syscall.ENOSPC)
		}
		budget--
		return real(d)
	}
	root := t.TempDir()
	var targets []Target
	for i := range 8 {
		dir := mkdir(t, root, fmt.Sprintf("p%d", i))
		targets = append(targets, Target{Key: dir, Dir: dir, Names: storeNames})
	}
	if err := w.Set(targets, nil); err != nil {
		t.Fatalf("set: %v (running out of watches is reported, not an error)", err)
	}
	recs := logs.Records(t, EventWatchLimit)
	if len(recs) != 1 || recs[0]["unwatched"] != float64(5) || !strings.Contains(fmt.Sprint(recs[0]["hint"]), "max_user_watches") && !strings.Contains(fmt.Sprint(recs[0]["hint"]), "open-file") {
		t.Fatalf("watch.limit lines: %v, want one with unwatched=5 and a hint", recs)
	}
	if n := len(logs.Records(t, "")); n != 1 {
		t.Errorf("%d log lines for 5 unwatched directories, want 1:\n%s", n, logs.String())
	}
	w.add = real
	w.mu.Lock()
	w.refreshAllLocked(true)
	w.mu.Unlock()
	recs = logs.Records(t, EventWatchLimit)
	if len(recs) != 2 || recs[1]["unwatched"] != float64(0) {
		t.Fatalf("after watches were freed: %v, want a second line with unwatched=0", recs)
	}
	if got := len(w.fsw.WatchList()); got != 8 {
		t.Errorf("%d directories watched, want 8", got)
	}
}
