//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// agentd without CAP_SYS_ADMIN (setpriv drops it from the effective and
// bounding sets; the uid stays root, so its scans still see the writer)
// gets no fanotify writer pids: a cp of a backup over a live store is
// caught after its first write by inotify and the main's header (cut
// short, an older change counter), every live writer is frozen, and the
// rewritten incident quarantines the old sidecars and kills the writer.
// Connections' own checkpoints, even after every commit, are not. A
// gateway started afterwards commits into a whole store.
func TestUnprivilegedCpOverLiveStore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("dropping CAP_SYS_ADMIN from agentd needs root to start with")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv not installed")
	}
	r := newAgentdRig(t, "")
	db := filepath.Join(r.home, "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	p := r.startCmd(t, exec.Command(setpriv, "--inh-caps=-sys_admin", "--bounding-set=-sys_admin", "--",
		agentdBinary(t), "run", "--config", r.config))
	p.waitLog(t, 30*time.Second, `"event":"store.discovered"`, db)
	p.waitLog(t, 30*time.Second, "caught after their first write")

	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 200, Linger: true})
	// Checkpoints are connections' writes into the main: one writer
	// checkpointing after every commit beside the first is no rewrite.
	hard := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "hard", Rate: 300, Count: 300, CheckpointEvery: 1})
	hard.WaitAcks(t, 300)
	<-hard.Done()
	if p.logHas(`"event":"rewrite.detected"`) {
		t.Fatal("a connection's checkpoints were taken for an in-place rewrite")
	}
	w.WaitAcks(t, 300)
	backup := filepath.Join(r.dir, "backup.db")
	hermestest.VacuumInto(t, db, backup)
	hermestest.ExecSQL(t, "file:"+backup, "PRAGMA journal_mode=WAL")
	w.AcksGrow(t, 40)
	if out, err := exec.Command("cp", backup, db).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	p.waitLog(t, 30*time.Second, `"event":"rewrite.detected"`, db)
	p.waitLog(t, 30*time.Second, `"event":"incident.opened"`, `"kind":"rewritten"`, db)
	p.waitLog(t, 60*time.Second, `"event":"incident.resolved"`, db)
	select {
	case <-w.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the writer (pid %d, state %c) was not released by the incident", w.Pid, hermestest.StateOf(w.Pid))
	}

	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "after", Count: 30})
	w2.WaitAcks(t, 30)
	<-w2.Done()
	c := hermestest.OpenDB(t, "file:"+db+"?_pragma=busy_timeout(10000)")
	var ic string
	if err := c.QueryRow("PRAGMA integrity_check").Scan(&ic); err != nil || ic != "ok" {
		t.Fatalf("integrity_check: %q %v", ic, err)
	}
	var n int
	if err := c.QueryRow("SELECT count(*) FROM messages WHERE session_id = 'after'").Scan(&n); err != nil || n != 30 {
		t.Fatalf("rows of the gateway started after the restore: %d %v, want 30", n, err)
	}
	if p.logHas(`"event":"rewrite.raced"`) {
		t.Error("rewrite.raced without writer pids")
	}
}
