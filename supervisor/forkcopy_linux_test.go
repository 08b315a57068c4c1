//go:build linux

package supervisor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// holdFDEnv makes the test binary hold fd 3 (given to it open) until its
// stdin closes: a child of the agent running the agent's executable, as
// an alert command is between its fork and its exec, holding one of the
// agent's fds.
const holdFDEnv = "STATEGUARD_TEST_HOLD_FD"

func holdFDMain() int {
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// A child of the agent that holds the old main only through fds copied
// from the agent (it runs the agent's executable: not exec'd yet) is no
// orphan holder: no incident, never frozen. The same fd in a child that
// has exec'd another program and kept it is one (the control). Before
// forkCopy the first case opened a replaced incident and froze the child,
// which is how an alert command caught between fork and exec once opened a
// second incident (TestIncidentWithHangingAlertsAndMetrics under -race).
func TestForkCopyOfAgentIsNoHolder(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cmd      func() *exec.Cmd
		incident bool
	}{
		{"agent's executable", func() *exec.Cmd {
			c := exec.Command(os.Args[0])
			c.Env = append(os.Environ(), holdFDEnv+"=1")
			return c
		}, false},
		{"exec'd program keeping the fd", func() *exec.Cmd { return exec.Command("sh", "-c", "echo ready; exec cat >/dev/null") }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home, db := testHome(t)
			var logs hermestest.LogBuffer
			a := startAgent(t, home, func(o *Options) {
				o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			})
			f, err := os.OpenFile(db, os.O_RDWR, 0) // O_CLOEXEC, as the agent's pins are
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cmd := tc.cmd()
			cmd.ExtraFiles = []*os.File{f}
			_, out := hermestest.StartPiped(t, cmd)
			if l := hermestest.FirstLine(t, "the fd holder", out, 30*time.Second); l != "ready" {
				t.Fatalf("holder said %q", l)
			}
			child := cmd.Process.Pid
			t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) }) // before StartPiped's wait
			waitHolder1(t, a, db, child)

			hermestest.RenameFreshOver(t, db) // the held inode is the old main now
			hermestest.Eventually(t, "the main's replacement to be classified", 30*time.Second, func() bool {
				for _, r := range logs.Records(t, EventGenerationChanged) {
					if strings.Contains(fmt.Sprint(r["change"]), "main-replaced") {
						return true
					}
				}
				return false
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := a.worker(db).do(ctx, func() {}); err != nil { // that check is done
				t.Fatal(err)
			}
			incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{Store: db})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(incs) > 0; got != tc.incident {
				t.Fatalf("incidents %+v, want an incident: %v\nagent log:\n%s", incs, tc.incident, logs.String())
			}
			if !tc.incident {
				if s := hermestest.StateOf(child); s == 'T' {
					t.Fatal("the agent's fork copy was left stopped")
				}
				if n := len(logs.Records(t, incident.EventHolderFrozen)); n > 0 {
					t.Fatalf("%d holder.frozen events for the agent's fork copy", n)
				}
			}
		})
	}
}

// waitHolder1 waits until the agent's cache lists pid holding db's main.
func waitHolder1(t *testing.T, a *Agent, db string, pid int) {
	t.Helper()
	hermestest.Eventually(t, "the agent to see the fd holder", 20*time.Second, func() bool {
		a.fullScan()
		sr, ok := a.cache.Known(holders.Target{Path: db})
		return ok && findPid(sr.Holders, pid) != nil
	})
}
