//go:build linux

package supervisor

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// forkingToolEnv makes the test binary a restore tool that, like rsync,
// writes the main from a process it forks once it has started: it prints
// "ready", waits for a line on stdin, then runs itself again
// (forkedWriterEnv, the same executable) to write the backup named by
// foreignBackupEnv over the main, opened write-only, and cut to size.
const (
	forkingToolEnv  = "STATEGUARD_TEST_FORKING_TOOL"
	forkedWriterEnv = "STATEGUARD_TEST_FORKED_WRITER"
)

func forkingToolMain(db string) int {
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "forking tool: stdin:", err)
		return 1
	}
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), forkedWriterEnv+"="+db, forkingToolEnv+"=")
	child.Stderr = os.Stderr
	if err := child.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "forking tool: writer:", err)
		return 1
	}
	return 0
}

func forkedWriterMain(db string) int {
	backup, err := os.ReadFile(os.Getenv(foreignBackupEnv))
	if err == nil {
		var f *os.File
		if f, err = os.OpenFile(db, os.O_WRONLY, 0); err == nil {
			if _, err = f.WriteAt(backup, 0); err == nil {
				err = f.Truncate(int64(len(backup)))
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "forked writer:", err)
		return 1
	}
	return 0
}

// A rewritten main's cut is where the live WAL stood when the rewrite
// gate held the tool's open of the main, its writers seen stopped: what
// they had committed by then is what the restore overwrote, and is rolled
// back exactly, also when the process that writes the main is one the tool
// forked long after it started (rsync's receiver, under load hundreds of
// milliseconds later) and the writers committed, checkpointed and
// restarted their WAL meanwhile. The cut used to be the tool's start,
// mapped onto the rows by their timestamps: under the race detector 1-146
// rows committed after the tool started were lost in 6 runs of 12 (they
// had been checkpointed into the main the tool then overwrote, so no
// capture held them), and the rows of that window that the WAL still held
// were replayed over the backup the operator restored.
func TestRewriteCutAtToolOpen(t *testing.T) {
	needFanotify(t)
	home, db := testHome(t)
	a := startAgent(t, home, guardOn)
	w := hostWriter(t, home, db, hermestest.WriterOptions{Rate: 200, Linger: true})
	waitHolder(t, a, db, w.Pid)
	w.WaitAcks(t, 300)
	backup := filepath.Join(home, "backup.db")
	walBackup(t, db, backup)
	restored := dbRows(t, backup)
	w.AcksGrow(t, 40) // rolled back by the restore on purpose

	tool := exec.Command(os.Args[0])
	tool.Env = append(os.Environ(), forkingToolEnv+"="+db, foreignBackupEnv+"="+backup)
	in, out := hermestest.StartPiped(t, tool)
	if l := hermestest.FirstLine(t, "forking tool", out, 30*time.Second); !strings.HasPrefix(l, "ready") {
		t.Fatalf("forking tool said %q", l)
	}
	w.AcksGrow(t, 30) // committed while the tool runs, before it forks its writer: rolled back too
	fmt.Fprintln(in, "go")
	if err := tool.Wait(); err != nil {
		t.Fatalf("forking tool: %v", err)
	}

	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed, journal.StateUnrecoverable)
	if inc.Kind != journal.KindRewritten || inc.State != journal.StateResolved || !inc.Detail.RewriteConfirmed {
		t.Fatalf("incident %s: kind %s state %s confirmed %v error %q, want rewritten resolved, confirmed",
			inc.ID, inc.Kind, inc.State, inc.Detail.RewriteConfirmed, inc.Detail.Error)
	}
	if c := inc.Detail.WALCut; c == nil || c.Source != "gate" {
		t.Fatalf("incident %s: wal cut %+v, want one read by the gate at the tool's open", inc.ID, c)
	}
	waitExit(t, w, 10*time.Second)
	waitSettled(t, a, db)
	if err := storeWhole(db); err != nil {
		t.Fatal(err)
	}
	// The writer was frozen at the tool's open and killed: every row it
	// acknowledged was committed before the cut. The store is the backup,
	// each of its rows once, none of the rolled-back ones.
	rows := dbRows(t, db)
	var missing, readded []int64
	for _, ack := range w.Acks(t) {
		c := hermestest.MessageContent(ack.Session, ack.Seq)
		switch n := rows[c]; {
		case restored[c] > 0 && n != 1:
			missing = append(missing, ack.Seq)
		case restored[c] == 0 && n > 0:
			readded = append(readded, ack.Seq)
		}
	}
	if len(missing)+len(readded) > 0 {
		t.Fatalf("incident %s, cut %+v: rows of the backup not there exactly once %v; rows committed before the tool's open re-added %v",
			inc.ID, inc.Detail.WALCut, missing, readded)
	}
}
