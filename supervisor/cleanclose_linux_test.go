package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// A process that creates its own WAL store, is seen by the agent as its
// holder, and then closes it cleanly (SQLite's last closer checkpoints,
// unlinks -shm and -wal) is never stopped, not even for an instant: the
// test is its parent and waits for it with WUNTRACED, so a SIGSTOP that a
// SIGCONT undoes a moment later still fails it. The guard is off (the
// Options default), so every close really unlinks the sidecars, as it does
// for a store created before the agent could arm its guard.
func TestCleanCloseIsNeverStopped(t *testing.T) {
	home, _ := testHome(t)
	if err := os.Mkdir(filepath.Join(home, "profiles"), 0o700); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, home, nil)
	bin, err := hermestest.WriterBinary()
	if err != nil {
		t.Fatal(err)
	}
	const runs = 100
	for i := range runs {
		db := filepath.Join(home, "profiles", fmt.Sprintf("p%d", i), "state.db")
		if err := os.Mkdir(filepath.Dir(db), 0o700); err != nil {
			t.Fatal(err)
		}
		c := spawnWatched(t, bin, "-db", db, "-create", "-count", "1", "-linger", "-checkpoint-every", "0")
		waitHolder(t, a, db, c.pid)
		if err := unix.Kill(c.pid, unix.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case st := <-c.exited:
			if st.stops > 0 {
				t.Fatalf("run %d: the writer was stopped %d times while it closed its own store", i, st.stops)
			}
			if st.code != 0 {
				t.Fatalf("run %d: writer exited with status %d", i, st.code)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("run %d: writer %d did not exit", i, c.pid)
		}
		for _, sfx := range []string{"-wal", "-shm"} {
			if _, err := os.Lstat(db + sfx); err == nil {
				t.Fatalf("run %d: %s%s still there: the close was not SQLite's last close, the test proves nothing", i, db, sfx)
			}
		}
	}
	if incs := listIncidents(t, a); len(incs) > 0 {
		t.Fatalf("clean closes opened %d incidents, first %s kind %s", len(incs), incs[0].ID, incs[0].Kind)
	}
}

// watched is a child of the test process, reaped by wait4 with WUNTRACED
// so every stop is seen.
type watched struct {
	pid    int
	exited chan childEnd
}

type childEnd struct {
	code  int // exit status, or 128+signal
	stops int // times it was seen stopped
}

// spawnWatched starts bin, waits for its "ready" line and reaps it with
// wait4(WUNTRACED): a stop is counted and undone with SIGCONT.
func spawnWatched(t *testing.T, bin string, args ...string) *watched {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := os.StartProcess(bin, append([]string{bin}, args...), &os.ProcAttr{Files: []*os.File{nil, pw, os.Stderr}})
	pw.Close()
	if err != nil {
		pr.Close()
		t.Fatal(err)
	}
	c := &watched{pid: p.Pid, exited: make(chan childEnd, 1)}
	go func() {
		var end childEnd
		for {
			var ws unix.WaitStatus
			if _, err := unix.Wait4(c.pid, &ws, unix.WUNTRACED, nil); err != nil {
				if errors.Is(err, unix.EINTR) {
					continue
				}
				end.code = -1
				break
			}
			if ws.Stopped() {
				end.stops++
				_ = unix.Kill(c.pid, unix.SIGCONT)
				continue
			}
			end.code = ws.ExitStatus()
			if ws.Signaled() {
				end.code = 128 + int(ws.Signal())
			}
			break
		}
		c.exited <- end
	}()
	t.Cleanup(func() { _ = unix.Kill(c.pid, unix.SIGKILL) })
	line, err := bufio.NewReader(pr).ReadString('\n')
	pr.Close()
	if err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("writer %d: %q %v", c.pid, line, err)
	}
	return c
}

func listIncidents(t *testing.T, a *Agent) []journal.Incident {
	t.Helper()
	incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return incs
}
