//go:build linux

package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// fanotifyMarked reports whether this process has a fanotify mark on the
// inode of path (/proc/self/fdinfo lists each mark's inode in hex).
func fanotifyMarked(t *testing.T, path string) bool {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("fanotify ino:%x ", st.Ino)
	infos, _ := filepath.Glob("/proc/self/fdinfo/*")
	for _, p := range infos {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), want) {
			return true
		}
	}
	return false
}

// A restarted agent resumes its unfinished incidents, but their steps
// (a divert takes seconds) come after the store's first check: that
// check is what watches the live main for in-place writes. The 1000-cycle
// seed 2 run had a cp over the live main 100 ms after a restart while the
// resumed divert held the worker for 3 s: nothing froze the writers, and
// the store ended malformed.
func TestResumedStepsComeAfterTheFirstCheck(t *testing.T) {
	needFanotify(t)
	home, db := testHome(t)
	reached, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hooks := incident.Hooks{BeforeStep: func(_ string, s journal.State) {
		if s == journal.StateCaptured {
			once.Do(func() { close(reached); <-proceed })
		}
	}}
	var opts Options
	a := startAgent(t, home, func(o *Options) {
		o.Policies.Replaced, o.Hooks = incident.PolicyKill, hooks
		opts = *o
	})
	var release sync.Once
	letGo := func() { release.Do(func() { close(proceed) }) }
	t.Cleanup(letGo)
	w := startHeldWriter(t, a, db)
	w.AcksGrow(t, 10)
	hermestest.RestoreOver(t, db)
	closeAtHeldStep(t, a, reached, letGo, "its divert")
	if inc := onlyIncident(t, opts.StateDir, db); inc.State != journal.StateCaptured {
		t.Fatalf("incident %s, want it left captured", inc.State)
	}

	var watched, seen bool
	opts.Hooks = incident.Hooks{BeforeStep: func(_ string, s journal.State) {
		if s == journal.StateCaptured && !seen {
			seen, watched = true, fanotifyMarked(t, db)
		}
	}}
	a2, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a2.Close(context.Background()) })
	got := waitIncident(t, a2, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if got.State != journal.StateResolved {
		t.Fatalf("after the restart: incident %s %s (%s)", got.ID, got.State, got.Detail.Error)
	}
	if !seen || !watched {
		t.Fatalf("resumed divert ran (%v) before the live main was watched for in-place writes", seen)
	}
}
