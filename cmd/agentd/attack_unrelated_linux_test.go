package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// Issue 14, "whom it may signal", end to end: during real incidents of
// alice's store (a real writer of hers, a copy moved over the store, root
// agentd), no process but the orphan's writer is ever stopped, not even
// for an instant (each is this test's child, reaped with WUNTRACED):
// a process of another uid holding its own WAL store, root's and bob's
// read-only holders of alice's store, and, after the first orphan's inode
// is freed, a process of bob's holding (for writing) a new file that got
// the freed orphan's inode number, through a second incident. None of
// them is named by a holder.frozen, holder.released or holder.thawed
// event.
func TestIncidentSignalsNoUnrelatedProcess(t *testing.T) {
	alice := attackUser(t, "sgsec2-u-alice")
	bob := attackUser(t, "sgsec2-u-bob")
	r := attackRig(t, alice, "")
	db := ownedStore(t, r, alice)
	base := filepath.Dir(r.home)
	bobDir, aliceDir := filepath.Join(base, "bob"), filepath.Join(base, "alice")
	mkOwned(t, bobDir, bob)
	mkOwned(t, aliceDir, alice)
	writer, err := hermestest.WriterBinary()
	if err != nil {
		t.Fatal(err)
	}
	asBob := &syscall.SysProcAttr{Credential: bob}
	unrelated := map[string]*hermestest.Watched{
		"bob's own store's writer": hermestest.SpawnWatched(t, asBob, writer, "-db", filepath.Join(bobDir, "state.db"),
			"-create", "-count", "5", "-linger", "-checkpoint-every", "0"),
	}
	p := r.start(t)
	p.waitLog(t, 30*time.Second, `"event":"store.discovered"`, db)

	incident := func(n int) {
		t.Helper()
		w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 50, Credential: alice,
			Ack: filepath.Join(aliceDir, "ack-"+strconv.Itoa(n))})
		w.AcksGrow(t, 3)
		asUser(t, alice, `cp "$1" "$1.copy" && mv "$1.copy" "$1"`, db)
		// The incident is real: its writer, the orphan's, is frozen.
		p.waitLog(t, 30*time.Second, `"event":"holder.frozen"`, fmt.Sprintf(`"pid":%d,`, w.Pid))
		waitCount(t, p, n, `"event":"incident.resolved"`)
		w.Kill()
		<-w.Done()
	}

	unrelated["root's read-only holder"] = hermestest.ReadOnlyHolder(t, nil, db)
	unrelated["bob's read-only holder"] = hermestest.ReadOnlyHolder(t, asBob, db)
	orphan, err := fileid.Lstat(db)
	if err != nil {
		t.Fatal(err)
	}
	incident(1)
	// The readers hold the first orphan: check them, then let it go.
	for _, name := range []string{"root's read-only holder", "bob's read-only holder"} {
		endUnstopped(t, name, unrelated[name])
		delete(unrelated, name)
	}
	// In the orphan's own directory, where the filesystem reuses a freed
	// inode number soonest.
	if f := reuseInodeNumber(t, r.home, orphan.ID); f != "" {
		if err := os.Chown(f, int(bob.Uid), int(bob.Gid)); err != nil {
			t.Fatal(err)
		}
		unrelated["bob's process on a file with the orphan's inode number"] = hermestest.SpawnWatched(t, asBob,
			"/bin/sh", "-c", `exec 3<>"$0" && echo ready && exec sleep 600`, f)
	}
	incident(2)
	log := p.log()
	for name, w := range unrelated {
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, fmt.Sprintf(`"pid":%d,`, w.Pid)) && (strings.Contains(line, `"event":"holder.frozen"`) ||
				strings.Contains(line, `"event":"holder.released"`) || strings.Contains(line, `"event":"holder.thawed"`)) {
				t.Errorf("%s (pid %d) named in: %s", name, w.Pid, line)
			}
		}
		endUnstopped(t, name, w)
	}
	stopWithin(t, p, agentdCloseTimeout)
}

// endUnstopped fails the test if w ended or was ever stopped, then kills it.
func endUnstopped(t *testing.T, name string, w *hermestest.Watched) {
	t.Helper()
	select {
	case end := <-w.Exited:
		t.Errorf("%s (pid %d) ended during the incident: %+v", name, w.Pid, end)
		return
	default:
	}
	_ = syscall.Kill(w.Pid, syscall.SIGKILL)
	if end := <-w.Exited; end.Stops > 0 {
		t.Errorf("%s (pid %d) was stopped %d times", name, w.Pid, end.Stops)
	}
}

// waitCount waits until the agent's log has n lines with every part.
func waitCount(t *testing.T, p *agentdProc, n int, parts ...string) {
	t.Helper()
	hermestest.Eventually(t, fmt.Sprintf("%d log lines with %q", n, parts), 90*time.Second, func() bool {
		c := 0
		for _, line := range strings.Split(p.log(), "\n") {
			ok := line != ""
			for _, s := range parts {
				ok = ok && strings.Contains(line, s)
			}
			if ok {
				c++
			}
		}
		return c >= n
	})
}

// reuseInodeNumber creates files in dir until the filesystem
// hands out id's inode number again, once the inode id named is freed, and
// returns that file, or "" (logged) when none got it.
func reuseInodeNumber(t *testing.T, dir string, id fileid.ID) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; time.Now().Before(deadline) && i < 50000; i++ {
		p := filepath.Join(dir, fmt.Sprintf("reuse-%d", i))
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if st, err := fileid.Lstat(p); err == nil && st.ID == id {
			t.Logf("%s got the first orphan's inode number %v", p, id)
			return p
		}
		if i%64 == 63 {
			time.Sleep(10 * time.Millisecond) // let the last pin's close free the inode
		}
	}
	out, _ := exec.Command("sh", "-c", "ls -l /proc/[0-9]*/fd 2>/dev/null | grep -F 'state.db (deleted)'").CombinedOutput()
	t.Logf("no new file got the inode number %v within the bound; that part is not exercised; deleted state.db held: %s", id, out)
	return ""
}
