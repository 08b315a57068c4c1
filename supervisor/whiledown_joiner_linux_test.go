//go:build linux

package supervisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// A process that opens the store read-write after a copy made while
// agentd was down and before the starting agent moves the old -wal aside
// joins that -wal with the copied main: the incident takes it as a
// holder, frozen, and releases it by its policy, and the store is whole. Waiting for it to exit (as for a
// reader) left the files in place after 10 s and the store malformed
// (1000-cycle seed 4: a gateway the harness restarted at that moment).
func TestJoinerOfARewriteFoundAtStartIsFrozen(t *testing.T) {
	for _, tool := range []string{"cp", "sqlite3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	home, db := testHome(t)
	stateDir := filepath.Join(t.TempDir(), "state")
	a := startAgent(t, home, func(o *Options) { o.StateDir, o.Guard = stateDir, true })
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 100, CheckpointEvery: -1, AutoCheckpoint: -1})
	waitHolder(t, a, db, w.Pid)
	w.WaitAcks(t, 20)
	backup := filepath.Join(home, "backup.db")
	walBackup(t, db, backup)
	w.AcksGrow(t, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	afterFault := faultUnderStoppedWriter(t, w, home, "cp backup.db state.db")

	// The joiner opens the store once the incident has frozen and pinned
	// the writer, before its release step quarantines the old -wal: a
	// sqlite3 shell opened read-write (as an operator's is), its
	// connection left open on the old -wal over the copied main.
	var joiner *exec.Cmd
	var once sync.Once
	hooks := incident.Hooks{BeforeStep: func(_ string, s journal.State) {
		if s != journal.StatePinned {
			return
		}
		once.Do(func() {
			c := exec.Command("sqlite3", db)
			in, err := c.StdinPipe()
			if err != nil || c.Start() != nil {
				return
			}
			t.Cleanup(func() { in.Close(); c.Process.Kill(); c.Wait() })
			fmt.Fprintln(in, "PRAGMA user_version;")
			deadline := time.Now().Add(10 * time.Second)
			for !holdsPath(c.Process.Pid, db+"-wal") && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			joiner = c
		})
	}}
	b := startAgent(t, home, func(o *Options) { o.StateDir, o.Guard, o.Hooks = stateDir, true, hooks })
	inc := waitIncident(t, b, db, 30*time.Second, journal.StateResolved, journal.StateFailed, journal.StateUnrecoverable)
	if inc.Kind != journal.KindRewritten || inc.State != journal.StateResolved {
		t.Fatalf("incident %s: kind %s state %s error %q, want rewritten resolved", inc.ID, inc.Kind, inc.State, inc.Detail.Error)
	}
	if joiner == nil {
		t.Fatal("the joiner never opened the store before the release step")
	}
	var adopted bool
	for _, h := range inc.Detail.Holders {
		adopted = adopted || h.PID == joiner.Process.Pid
	}
	if !adopted || strings.Contains(inc.Detail.Error, "already joined") {
		t.Fatalf("incident %s: holders %+v, error %q; want the joiner %d among its holders", inc.ID, inc.Detail.Holders, inc.Detail.Error, joiner.Process.Pid)
	}
	waitExit(t, w, 10*time.Second)
	if err := joiner.Wait(); err == nil {
		t.Error("the joiner exited by itself; want it killed by the incident's policy")
	}
	if err := storeWhole(db); err != nil {
		t.Fatal(err)
	}
	rows := dbRows(t, db)
	checkExactlyOnce(t, w.Acks(t)[afterFault:], rows, time.Time{}, time.Time{}) // acknowledged after the cp
}

// holdsPath reports whether pid has path open (by name, as /proc shows it).
func holdsPath(pid int, path string) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	es, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range es {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == path {
			return true
		}
	}
	return false
}
