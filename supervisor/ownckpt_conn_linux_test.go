//go:build linux

package supervisor

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// sqliteSession is a sqlite3 CLI kept open on a store: a real connection
// the test drives one statement batch at a time.
type sqliteSession struct {
	pid  int
	send func(script string) string
}

// openSQLite starts `sqlite3 state.db` in home; send writes a script and
// returns the output line of the `SELECT 'done';` it appends.
func openSQLite(t *testing.T, home string) sqliteSession {
	t.Helper()
	cmd := exec.Command("sqlite3", "state.db")
	cmd.Dir = home
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("sqlite3: %v", err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	r := bufio.NewReader(out)
	send := func(script string) string {
		t.Helper()
		if _, err := in.Write([]byte(script + "\nSELECT 'done';\n")); err != nil {
			t.Fatalf("sqlite3 %d: %v", cmd.Process.Pid, err)
		}
		var lines []string
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("sqlite3 %d after %q: %v", cmd.Process.Pid, lines, err)
			}
			if l == "done\n" {
				return strings.Join(lines, "")
			}
			lines = append(lines, l)
		}
	}
	return sqliteSession{pid: cmd.Process.Pid, send: send}
}

// CI's TestSidecarLostIncident under -race on f5798bf: a live writer the
// scan knew as a connection checkpointed every few hundred milliseconds,
// and each of its writes into the main yielded the replay running on
// the worker before the write was found to be a connection's. A slow
// replay never finished (30 s of "replay waits"). A known connection's
// write yields nothing.
func TestReplayKeepsRunningWhileAConnectionCheckpoints(t *testing.T) {
	needFanotify(t)
	home, db := testHome(t)
	a := startAgent(t, home, func(o *Options) { o.Guard = true })
	// Frames the checkpoint will copy into the main: the connection
	// keeps them in its WAL (no autocheckpoint).
	conn := openSQLite(t, home)
	conn.send("PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; CREATE TABLE stateguard_ckpt(x); INSERT INTO stateguard_ckpt VALUES (1);")
	// The replay waits on the write lock the locker holds.
	locker := openSQLite(t, home)
	locker.send("BEGIN IMMEDIATE;")
	waitHolder(t, a, db, conn.pid)
	waitHolder(t, a, db, locker.pid)
	job := queueReplay(t, a, db)
	waitReplayOnWorker(t, a, db)

	res := conn.send("PRAGMA wal_checkpoint(PASSIVE);")
	var busy, logFrames, done int
	if _, err := fmt.Sscanf(strings.TrimSpace(res), "%d|%d|%d", &busy, &logFrames, &done); err != nil || done == 0 {
		t.Fatalf("checkpoint %q (%v): want frames copied into the main", res, err)
	}
	w := a.worker(db)
	var j journal.Job
	hermestest.Eventually(t, "the connection's write into the main to be handled, or the replay to end", 20*time.Second, func() bool {
		var err error
		j, err = a.journal.GetJob(context.Background(), job.ID)
		return w.vouched(conn.pid) || (err == nil && j.State != journal.JobRunning)
	})
	w.replayMu.Lock()
	running := w.replayCancel != nil
	w.replayMu.Unlock()
	if j.State != journal.JobRunning || !running {
		t.Fatalf("job %s (replay on the worker %v), last error %q: a connection's checkpoint yielded the replay", j.State, running, j.LastError)
	}
}
