package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// Issue 33's foreign files and processes, against the real agentd binary
// as root, with real users: a file at a store's path that is not the
// store's own (another owner, a sidecar linked twice) is never guarded,
// pinned, captured or frozen for, and another user's process that holds
// none of SQLite's locks on a store is never signalled for it.

// sharedDir is a directory every user may write and rename out of (no
// sticky bit), as a group's shared directory is.
func sharedDir(t *testing.T, base string) string {
	t.Helper()
	d := filepath.Join(base, "shared")
	if err := os.Mkdir(d, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	return d
}

// expectLog is the first log line with every part, waited for; a
// failure, not the end of the test, when none comes (what the test checks
// next still says what agentd did).
func expectLog(t *testing.T, p *agentdProc, timeout time.Duration, parts ...string) string {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; {
		if lines := p.logLines(parts...); len(lines) > 0 {
			return lines[0]
		}
		if time.Now().After(deadline) {
			t.Errorf("no log line with %q within %v", parts, timeout)
			return ""
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// guardOf is the store's guard in agentd's status.
func guardOf(t *testing.T, socket, path string) (g struct{ State, Reason string }) {
	t.Helper()
	var st struct {
		Stores []struct {
			Path  string `json:"path"`
			Guard *struct {
				State  string `json:"state"`
				Reason string `json:"reason"`
			} `json:"guard"`
		} `json:"stores"`
	}
	apiJSON(t, socket, "GET", "/v1/status", nil, &st)
	for _, s := range st.Stores {
		if s.Path == path && s.Guard != nil {
			g.State, g.Reason = s.Guard.State, s.Guard.Reason
		}
	}
	return g
}

// noSignalEvent fails if the log names pid in a freeze or release event.
func noSignalEvent(t *testing.T, p *agentdProc, name string, pid int) {
	t.Helper()
	for _, line := range strings.Split(p.log(), "\n") {
		if strings.Contains(line, fmt.Sprintf(`"pid":%d,`, pid)) && (strings.Contains(line, `"event":"holder.frozen"`) ||
			strings.Contains(line, `"event":"holder.released"`) || strings.Contains(line, `"event":"holder.thawed"`)) {
			t.Errorf("%s (pid %d) named in: %s", name, pid, line)
		}
	}
}

// Carol renames dave's 0600 store (his writer has it open) out of a
// shared directory into her profile as state.db, then moves her own copy
// back over it, orphaning dave's file under his writer. agentd says the
// file is foreign and does nothing for it: no incident, nothing copied
// into carol's profile, dave's writer never stopped.
func TestAttackForeignMainRenamedIntoProfile(t *testing.T) {
	base := trustBase(t)
	carol := newTrustUser(t, base, "sgsec4-f1-carol")
	dave := attackUser(t, "sgsec4-f1-dave")
	shared := sharedDir(t, base)
	daveDB := filepath.Join(shared, "dave.db")
	writer, err := hermestest.WriterBinary()
	if err != nil {
		t.Fatal(err)
	}
	daveW := hermestest.SpawnWatched(t, &syscall.SysProcAttr{Credential: dave}, writer, "-db", daveDB,
		"-create", "-count", "5", "-linger", "-checkpoint-every", "0", "-session", "dave-secret")
	if err := os.Chmod(daveDB, 0o600); err != nil {
		t.Fatal(err)
	}
	prof := filepath.Dir(carol.store())
	carol.as(t, `cp "$1" "$1.keep"`, carol.store())
	r := trustRig(t, base, "", carol.hermes)
	p := r.start(t)
	p.waitLog(t, 30*time.Second, `"event":"agent.started"`)
	before := treeOf(t, prof)

	carol.as(t, `mv "$1" "$2"`, daveDB, carol.store())
	line := expectLog(t, p, 30*time.Second, `"event":"store.foreign"`, carol.store())
	if line != "" && !strings.Contains(line, "owned by uid") {
		t.Errorf("store.foreign does not say the file is another user's: %s", line)
	}
	waitReconciles(t, p, 2) // the scans have seen dave's writer on it
	if g := guardOf(t, r.socket, carol.store()); g.State != "unavailable" || !strings.Contains(g.Reason, "foreign file") {
		t.Errorf("status of carol's store: guard %+v, want unavailable for the foreign file", g)
	}
	carol.as(t, `mv "$1.keep" "$1"`, carol.store())
	waitReconciles(t, p, 3)

	for _, ev := range []string{`"event":"incident.opened"`, `"event":"holder.frozen"`, `"event":"holder.pinned"`} {
		if p.logHas(ev) {
			t.Errorf("agentd logged %s for dave's file", ev)
		}
	}
	noSignalEvent(t, p, "dave's writer", daveW.Pid)
	delete(before, carol.store()+".keep")
	for path := range treeOf(t, prof) {
		if _, ok := before[path]; !ok && !strings.HasPrefix(path, carol.store()) {
			t.Errorf("new in carol's profile: %s", path)
		}
	}
	stopWithin(t, p, agentdCloseTimeout)
	endUnstopped(t, "dave's writer", daveW)
}

// A world-writable file root writes into (through its own fd) is hard
// linked by carol over her -wal, and the link then removed: root's
// process holds an inode no longer at her store's path. It was never
// hers: agentd reports the linked -wal as foreign, opens no incident and
// never stops root's process. Then carol links a file of her own twice as
// her -wal: foreign for its two links.
func TestAttackForeignHardLinkedWAL(t *testing.T) {
	base := trustBase(t)
	carol := newTrustUser(t, base, "sgsec4-f2-carol")
	shared := sharedDir(t, base)
	rootFile := filepath.Join(shared, "root.log")
	if err := os.WriteFile(rootFile, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(rootFile, 0o666); err != nil {
		t.Fatal(err)
	}
	rootW := hermestest.SpawnWatched(t, nil, "/bin/sh", "-c",
		`exec 3>>"$0" && echo ready && while :; do echo line >&3; sleep 0.05; done`, rootFile)
	r := trustRig(t, base, "", carol.hermes)
	p := r.start(t)
	p.waitLog(t, 30*time.Second, `"event":"agent.started"`)
	wal := carol.store() + "-wal"

	carol.as(t, `ln "$1" "$2.tmp" && mv "$2.tmp" "$2"`, rootFile, wal)
	expectLog(t, p, 30*time.Second, `"event":"store.foreign"`, wal, "owned by uid 0")
	waitReconciles(t, p, 2) // the scans have seen root's process on it
	carol.as(t, `rm "$1"`, wal)
	waitReconciles(t, p, 3)
	for _, ev := range []string{`"event":"incident.opened"`, `"event":"holder.frozen"`} {
		if p.logHas(ev) {
			t.Errorf("agentd logged %s for root's file", ev)
		}
	}
	noSignalEvent(t, p, "root's writer", rootW.Pid)

	mine := filepath.Join(shared, "carol.bin")
	carol.as(t, `: > "$1" && ln "$1" "$2.tmp" && mv "$2.tmp" "$2"`, mine, wal)
	expectLog(t, p, 30*time.Second, `"event":"store.foreign"`, wal, "has 2 links")
	stopWithin(t, p, agentdCloseTimeout)
	endUnstopped(t, "root's writer", rootW)
}

// Carol's writer runs on her store; a root process holds an fd of her
// -wal (as one passed to it over a socket would be: the same in /proc),
// with none of SQLite's locks. Carol removes her sidecars: her writer is
// the orphan's and is handled; root's process is reported as a foreign
// holder and never stopped or killed.
func TestAttackForeignFDHolderNeverSignalled(t *testing.T) {
	base := trustBase(t)
	carol := newTrustUser(t, base, "sgsec4-f3-carol")
	r := trustRig(t, base, "", carol.hermes)
	p := r.start(t)
	p.waitLog(t, 30*time.Second, `"event":"agent.started"`)
	w := carol.writer(t, "carol-s")
	p.waitLog(t, 30*time.Second, `"event":"guard.armed"`, carol.store())
	rootH := hermestest.SpawnWatched(t, nil, "/bin/sh", "-c", `exec 3<>"$0" && echo ready && exec sleep 600`, carol.store()+"-wal")
	waitReconciles(t, p, 2) // the scans have seen root's process on it

	carol.as(t, `rm -f "$1-wal" "$1-shm"`, carol.store())
	opened := p.waitLog(t, 30*time.Second, `"event":"incident.opened"`, carol.store())
	if !strings.Contains(opened, fmt.Sprintf(`pid %d: uid 0 is not the store's owner`, rootH.Pid)) {
		t.Errorf("the incident does not report root's process %d as a foreign holder: %s", rootH.Pid, opened)
	}
	id := logField(t, opened, "incident")
	waitIncidentState(t, r.socket, id, 90*time.Second, func(i incidentOf) bool {
		return i.Incident.State == "resolved" || i.Incident.State == "failed" || i.Incident.State == "needs_action"
	})
	select {
	case <-w.Done():
	case <-time.After(30 * time.Second):
		t.Errorf("carol's writer %d, the orphan's, was not released", w.Pid)
	}
	noSignalEvent(t, p, "root's fd holder", rootH.Pid)
	stopWithin(t, p, agentdCloseTimeout)
	endUnstopped(t, "root's fd holder", rootH)
}
