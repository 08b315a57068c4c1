//go:build linux

package supervisor

import (
	"context"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// An incident still unfinished when agentd stops (here a replaced one,
// held before its divert) is resumed by the next agent, but it does not
// own the files now at the path: a backup copied over the live main
// while agentd was down is found by the look at start all the same. The
// 1000-cycle seed 4 run had five incidents resumed at a start after a
// `cp` in place; the look was skipped for them and the store ended
// malformed.
func TestRewriteWhileDownWithAResumedIncident(t *testing.T) {
	if _, err := exec.LookPath("cp"); err != nil {
		t.Skipf("no cp: %v", err)
	}
	home, db := testHome(t)
	reached, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var opts Options
	a := startAgent(t, home, func(o *Options) {
		o.Guard, o.Policies.Replaced = true, incident.PolicyKill
		o.Hooks = incident.Hooks{BeforeStep: func(_ string, s journal.State) {
			if s == journal.StateCaptured {
				once.Do(func() { close(reached); <-proceed })
			}
		}}
		opts = *o
	})
	var release sync.Once
	letGo := func() { release.Do(func() { close(proceed) }) }
	t.Cleanup(letGo)
	w1 := startHeldWriter(t, a, db)
	w1.AcksGrow(t, 10)
	hermestest.RestoreOver(t, db)
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the replaced incident never reached its divert")
	}

	// The writer of the restored store, which the cp will rewrite under;
	// a session of its own, as the first writer's rows come back too.
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "after", Rate: 100, CheckpointEvery: -1, AutoCheckpoint: -1})
	w.WaitAcks(t, 20)
	backup := filepath.Join(home, "backup.db")
	walBackup(t, db, backup)
	w.AcksGrow(t, 10)
	closeAtHeldStep(t, a, reached, letGo, "its divert")
	if inc := onlyIncident(t, opts.StateDir, db); inc.State != journal.StateCaptured {
		t.Fatalf("incident %s, want it left captured", inc.State)
	}

	w.AcksGrow(t, 5)
	afterFault := faultUnderStoppedWriter(t, w, home, "cp backup.db state.db")
	w.AcksGrow(t, 10)

	opts.Hooks = incident.Hooks{}
	b, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	var rewritten journal.Incident
	hermestest.Eventually(t, "a rewritten incident found at start, resolved, and the resumed one resolved", 30*time.Second, func() bool {
		incs, err := b.journal.ListIncidents(context.Background(), journal.ListOptions{Store: db})
		if err != nil {
			return false
		}
		var found, open bool
		for _, inc := range incs {
			if inc.State != journal.StateResolved {
				open = true
			}
			if inc.Kind == journal.KindRewritten {
				rewritten, found = inc, true
			}
		}
		return found && !open
	})
	if c := rewritten.Detail.WALCut; c == nil || c.Source != "journal" {
		t.Errorf("incident %s: wal cut %+v, want the position the stopping agent journaled", rewritten.ID, c)
	}
	waitExit(t, w, 10*time.Second)
	if err := storeWhole(db); err != nil {
		t.Fatal(err)
	}
	rows := dbRows(t, db)
	checkExactlyOnce(t, w.Acks(t)[afterFault:], rows, time.Time{}, time.Time{}) // acknowledged after the cp
}
