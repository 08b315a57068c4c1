package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// cleanCloseLauncher runs the writer as cred: its argv, the process the
// test is the parent of (and so sees stopped with WUNTRACED) first.
type cleanCloseLauncher struct {
	name string
	argv func(cred *syscall.Credential, user, writer string, args []string) []string
}

var cleanCloseLaunchers = []cleanCloseLauncher{
	// setpriv execs the writer: the test's child is the writer itself.
	{"setpriv", func(cred *syscall.Credential, _, writer string, args []string) []string {
		return append([]string{"/usr/bin/setpriv", "--reuid=" + strconv.Itoa(int(cred.Uid)), "--regid=" + strconv.Itoa(int(cred.Gid)),
			"--clear-groups", "--", writer}, args...)
	}},
	// su forks the writer and waits for it with WUNTRACED: when the
	// writer is stopped, su stops itself (the audit's su stayed stopped
	// for ten minutes), which the test, su's parent, sees.
	{"su", func(_ *syscall.Credential, user, writer string, args []string) []string {
		cmd := "exec " + writer
		for _, a := range args {
			cmd += " " + a
		}
		return []string{"/usr/bin/su", "-s", "/bin/sh", "-c", cmd, user}
	}},
}

// Attack row 9: a process of alice's that creates a WAL store in her home
// and closes it cleanly, right after root agentd starts (while it
// discovers, scans and arms), is never stopped, not even for an instant,
// whether it runs under setpriv or under su. Each round restarts agentd
// and runs the writer in a loop from the moment agentd is started until
// after agent.started; nothing is logged as frozen or thawed and no
// incident opens. With the guard off every close is SQLite's last close
// (it unlinks -wal and -shm); with it on (the default) the first ones are,
// before the guard arms.
func TestAttackCleanCloseAfterStartNeverStopped(t *testing.T) {
	alice := attackUser(t, "sgsec2-r9-alice")
	aliceName := hermestest.UserName(t, int(alice.Uid))
	writer, err := hermestest.WriterBinary()
	if err != nil {
		t.Fatal(err)
	}
	runs, lastCloses := 0, 0
	for _, guard := range []bool{false, true} {
		r := attackRig(t, alice, "")
		if !guard {
			cfg, err := os.ReadFile(r.config)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(r.config, append([]byte("guard = false\n"), cfg...), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		profiles := filepath.Join(r.home, "profiles")
		mkOwned(t, profiles, alice)
		for _, l := range cleanCloseLaunchers {
			if _, err := os.Stat(l.argv(alice, "x", "x", nil)[0]); err != nil {
				t.Logf("%s not installed: skipped", l.name)
				continue
			}
			for round := range 3 {
				what := fmt.Sprintf("guard %v, %s, round %d", guard, l.name, round)
				p := r.start(t)
				n, closes := cleanCloseLoop(t, p, what, func(i int) (string, []string) {
					dir := filepath.Join(profiles, fmt.Sprintf("%s-%d-%d", l.name, round, i))
					mkOwned(t, dir, alice)
					db := filepath.Join(dir, "state.db")
					return db, l.argv(alice, aliceName, writer, []string{"-db", db,
						"-create", "-count", "20", "-rate", "200", "-checkpoint-every", "0"})
				})
				runs, lastCloses = runs+n, lastCloses+closes
				if !guard && closes != n {
					t.Fatalf("%s: %d of %d closes left -wal/-shm with the guard off: not SQLite's last close, the run proves nothing", what, n-closes, n)
				}
				stopWithin(t, p, agentdCloseTimeout)
				for _, ev := range []string{`"event":"holder.frozen"`, `"event":"holder.thawed"`, `"event":"incident.opened"`} {
					if p.logHas(ev) {
						t.Fatalf("%s: agentd logged %s for clean closes", what, ev)
					}
				}
			}
		}
	}
	if runs == 0 {
		t.Skip("neither setpriv nor su is installed")
	}
	t.Logf("%d runs, %d of them SQLite's last close (-wal and -shm unlinked); none stopped", runs, lastCloses)
}

func mkOwned(t *testing.T, dir string, owner *syscall.Credential) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, int(owner.Uid), int(owner.Gid)); err != nil {
		t.Fatal(err)
	}
}

// cleanCloseLoop runs argv(i) one after the other, from now until three
// runs after agentd logged agent.started, each the test's child reaped
// with WUNTRACED; it fails the test at the first stop or failure, and
// returns the runs and how many of them unlinked their -wal and -shm.
func cleanCloseLoop(t *testing.T, p *agentdProc, what string, argv func(i int) (db string, argv []string)) (runs, lastCloses int) {
	t.Helper()
	const afterStart = 3
	after := -1
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; after < afterStart; i++ {
		select {
		case <-p.done:
			t.Fatalf("%s: agentd exited: %v", what, p.err)
		default:
		}
		if after < 0 && p.logHas(`"event":"agent.started"`) {
			after = 0
		} else if after < 0 && time.Now().After(deadline) {
			t.Fatalf("%s: no agent.started within 60 s", what)
		}
		db, args := argv(i)
		c := hermestest.SpawnWatched(t, nil, args...)
		select {
		case end := <-c.Exited:
			if end.Stops > 0 {
				t.Fatalf("%s, run %d: %s (pid %d) was stopped %d times while it created and closed its own store %s; agentd logged about it:\n%s",
					what, i, args[0], c.Pid, end.Stops, db, stopEvidence(p, c.Pid, db))
			}
			if end.Code != 0 {
				t.Fatalf("%s, run %d: %s exited with status %d", what, i, args[0], end.Code)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%s, run %d: pid %d did not exit (state %c)", what, i, c.Pid, hermestest.StateOf(c.Pid))
		}
		if !exists(db+"-wal") && !exists(db+"-shm") {
			lastCloses++
		}
		runs++
		if after >= 0 {
			after++
		}
	}
	return runs, lastCloses
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// stopEvidence is what agentd logged about pid (what it froze, thawed, and
// on which evidence: the fast freeze's debug line names the stale files
// and the generation it judged against) and about the store db, waiting
// up to 5 s for a first line about pid: the thaw is logged after the
// process was seen stopped. "nothing" means the stop came from elsewhere.
func stopEvidence(p *agentdProc, pid int, db string) string {
	about := func() []string {
		var out []string
		for _, end := range []string{",", "}"} {
			out = append(out, p.logLines(fmt.Sprintf(`"pid":%d%s`, pid, end))...)
		}
		return out
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(about()) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	lines := about()
	if len(lines) == 0 {
		lines = []string{"nothing naming the pid (the stop came from outside agentd?)"}
	}
	store := p.logLines(`"store":"` + db + `"`)
	return strings.Join(lines, "\n") + "\nabout the store:\n" + strings.Join(store, "\n")
}
