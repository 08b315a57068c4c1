package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// The multi-user attacks of issue 14 that track safety owns, each against
// a real root agentd with real users (created here, removed at cleanup).

// attackUser creates a user for one test (a leftover of a crashed run is
// removed first) and returns its credential.
func attackUser(t *testing.T, name string) *syscall.Credential {
	t.Helper()
	uid, gid := hermestest.AddUser(t, name)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// attackRig is an agentd rig whose Hermes home belongs to owner, in a
// tree other users may traverse (mode 0755 all the way).
func attackRig(t *testing.T, owner *syscall.Credential, extra string) *agentdRig {
	t.Helper()
	base, err := os.MkdirTemp("", "sgsafe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &agentdRig{home: filepath.Join(base, "hermes"), dir: filepath.Join(base, "agent"),
		stateDir: filepath.Join(base, "agent", "state"), socket: filepath.Join(base, "agent", "agent.sock")}
	r.config = filepath.Join(r.dir, "agent.toml")
	if err := os.Mkdir(r.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(r.home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(r.home, int(owner.Uid), int(owner.Gid)); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("state_dir = %q\nsocket = %q\nreconcile = \"200ms\"\ndiscover_users = false\nhomes = [%q]\n[log]\nlevel = \"debug\"\n%s",
		r.stateDir, r.socket, r.home, extra)
	if err := os.WriteFile(r.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

// ownedStore creates the home's default store as owner, readable by all.
func ownedStore(t *testing.T, r *agentdRig, owner *syscall.Credential) string {
	t.Helper()
	db := filepath.Join(r.home, "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		if err := os.Chown(p, int(owner.Uid), int(owner.Gid)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return db
}

// asUser runs a shell command as cred and fails the test if it fails.
func asUser(t *testing.T, cred *syscall.Credential, script string, args ...string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as uid %d: %s: %v\n%s", cred.Uid, script, err, out)
	}
}

// Attack row 5: a root process and one of bob's each hold a read-only fd
// on alice's state.db; alice moves a copy over it. Both are orphan
// holders of the old main, and neither can write it: they are pinned and
// reported in the incident, never stopped or killed (each is this test's
// child, reaped with WUNTRACED, so even a stop undone at once fails it).
func TestAttackReadOnlyHoldersNeverSignalled(t *testing.T) {
	alice := attackUser(t, "sgsafe-r5-alice")
	bob := attackUser(t, "sgsafe-r5-bob")
	r := attackRig(t, alice, "")
	db := ownedStore(t, r, alice)
	p := r.start(t)
	p.waitLog(t, 30*time.Second, `"event":"store.discovered"`, db)
	p.waitLog(t, 30*time.Second, `"event":"agent.started"`) // the store had its first check

	rootReader := hermestest.ReadOnlyHolder(t, nil, db)
	bobReader := hermestest.ReadOnlyHolder(t, &syscall.SysProcAttr{Credential: bob}, db)
	asUser(t, alice, `cp "$1" "$1.copy" && mv "$1.copy" "$1"`, db)

	opened := p.waitLog(t, 30*time.Second, `"event":"incident.opened"`, db)
	for _, pid := range []int{rootReader.Pid, bobReader.Pid} {
		if !strings.Contains(opened, strconv.Itoa(pid)) {
			t.Errorf("incident.opened does not name read-only holder %d: %s", pid, opened)
		}
	}
	p.waitLog(t, 60*time.Second, `"event":"incident.resolved"`, db)
	for name, w := range map[string]*hermestest.Watched{"root's reader": rootReader, "bob's reader": bobReader} {
		select {
		case end := <-w.Exited:
			t.Errorf("%s (pid %d) ended: %+v", name, w.Pid, end)
		default:
		}
		_ = syscall.Kill(w.Pid, syscall.SIGKILL)
		if end := <-w.Exited; end.Stops > 0 {
			t.Errorf("%s (pid %d) was stopped %d times", name, w.Pid, end.Stops)
		}
	}
	stopWithin(t, p, agentdCloseTimeout)
	for _, ev := range []string{`"event":"holder.frozen"`, `"event":"holder.released"`} {
		if p.logHas(ev) {
			t.Errorf("agentd logged %s for read-only holders", ev)
		}
	}
}

// agentdCloseTimeout is how long agentd run gives Close after SIGTERM
// (cmd_run.go); the process must be gone within it, plus the time to
// flush its log and exit.
const agentdCloseTimeout = 30*time.Second + 5*time.Second

// stopWithin sends SIGTERM and fails the test unless agentd exits within
// d, whatever one store is doing.
func stopWithin(t *testing.T, p *agentdProc, d time.Duration) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(d):
		// Say whether something else stopped it (state T: a SIGSTOP it
		// cannot answer), and dump its goroutines (SIGQUIT) for the log.
		st := hermestest.StateOf(p.cmd.Process.Pid)
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		t.Fatalf("agentd still running %v after SIGTERM (its state was %c); goroutines in its log", d, st)
	}
}

// Attack row 6: alice puts a FIFO named state.db-wal next to her store,
// keeps it open, then unlinks it. Nothing of agentd opens it in a way that
// waits (the scan ignores non-regular files, pins and reads open
// O_NONBLOCK and check fstat, SQLite is never pointed at a FIFO), so the
// agent still answers, never stops her process, and SIGTERM ends it within
// its stop timeout, before and after a restart.
func TestAttackFIFOWALNeverHangs(t *testing.T) {
	alice := attackUser(t, "sgsafe-r6-alice")
	r := attackRig(t, alice, "")
	db := ownedStore(t, r, alice)
	p := r.start(t)
	p.waitLog(t, 30*time.Second, `"event":"store.discovered"`, db)
	// After the agent's first check of the store: a FIFO made before it
	// is in the store's first generation, and no wal-created is logged.
	p.waitLog(t, 30*time.Second, `"event":"agent.started"`)

	asUser(t, alice, `mkfifo "$1-wal"`, db)
	holder := hermestest.SpawnWatched(t, &syscall.SysProcAttr{Credential: alice},
		"/bin/sh", "-c", `exec 3<>"$0-wal" && echo ready && exec sleep 600`, db)
	p.waitLog(t, 30*time.Second, `"event":"generation.changed"`, db, "wal-created")
	asUser(t, alice, `rm "$1-wal"`, db)
	p.waitLog(t, 30*time.Second, `"event":"generation.changed"`, db, "wal-removed")
	// Several reconciles (200ms each) with the unlinked FIFO held: each
	// one a full scan of alice's holder.
	waitAnswers(t, r.socket, 3)
	stopWithin(t, p, agentdCloseTimeout)

	// The hang returned after a restart in the audit: the next agent
	// meets the same held FIFO.
	p2 := r.start(t)
	p2.waitLog(t, 30*time.Second, `"event":"agent.started"`)
	waitAnswers(t, r.socket, 3)
	stopWithin(t, p2, agentdCloseTimeout)

	select {
	case end := <-holder.Exited:
		t.Fatalf("alice's FIFO holder ended: %+v", end)
	default:
	}
	_ = syscall.Kill(holder.Pid, syscall.SIGKILL)
	if end := <-holder.Exited; end.Stops > 0 {
		t.Errorf("alice's FIFO holder was stopped %d times", end.Stops)
	}
	if strings.Contains(p.log()+p2.log(), `"event":"incident.opened"`) {
		t.Error("a FIFO held under the -wal name opened an incident")
	}
}

// waitAnswers asks agentd's status n times in a row over its socket; each
// must answer within 10 s (a status runs a holder scan on the same
// machinery a hung pin would block).
func waitAnswers(t *testing.T, socket string, n int) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}}}
	for i := range n {
		resp, err := c.Get("http://agentd/v1/status")
		if err != nil {
			t.Fatalf("status %d over %s: %v", i, socket, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d over %s: %s", i, socket, resp.Status)
		}
	}
}

// Attack row 7: alice grows her live store's -wal to a sparse 1 GiB and
// its main to a sparse 3 GiB, then unlinks the sidecars under her own
// writer (sidecar_lost). What agentd writes for the incident (the main's
// snapshot, the capture, its private copies in the temp dir) is measured
// in st_blocks: a few MiB, not gigabytes; and agentd stops within its
// stop timeout afterwards.
func TestAttackSparseFilesBoundedDisk(t *testing.T) {
	alice := attackUser(t, "sgsafe-r7-alice")
	r := attackRig(t, alice, "")
	db := ownedStore(t, r, alice)
	ackDir := filepath.Join(filepath.Dir(r.home), "ack")
	if err := os.Mkdir(ackDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ackDir, int(alice.Uid), int(alice.Gid)); err != nil {
		t.Fatal(err)
	}
	p := r.start(t)
	p.waitLog(t, 30*time.Second, `"event":"store.discovered"`, db)
	p.waitLog(t, 30*time.Second, `"event":"agent.started"`) // the store had its first check
	hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 50, Credential: alice, Ack: filepath.Join(ackDir, "ack")})
	p.waitLog(t, 30*time.Second, `"event":"guard.armed"`, db)
	before := diskBlocks(t, r.home)

	asUser(t, alice, `truncate -s 1G "$1-wal" && truncate -s 3G "$1" && rm "$1-wal" "$1-shm"`, db)
	p.waitLog(t, 30*time.Second, `"event":"incident.opened"`, db) // sidecar_lost, or rewritten when the truncate of the main is seen first
	p.waitLog(t, 60*time.Second, `"event":"capture.written"`, db)
	// The divert runs once (a header-only capture diverts only what the
	// WAL's own page images hold; whether it succeeds is not this test's).
	p.waitLog(t, 60*time.Second, `"event":"divert.`, db)
	if grown := diskBlocks(t, r.home) - before; grown > 64<<20 {
		t.Errorf("alice's home grew by %d bytes on disk for one incident over sparse files", grown)
	}
	pid := p.cmd.Process.Pid
	stopWithin(t, p, agentdCloseTimeout)
	if left := privateCopiesOf(t, pid); len(left) > 0 {
		t.Errorf("agentd left private copies behind: %v", left)
	}
}

// diskBlocks is what the files under dir take on disk (st_blocks).
func diskBlocks(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return nil // a file removed while walking
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) == nil {
			n += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// privateCopiesOf lists the temp dir's private capture copies made by pid.
func privateCopiesOf(t *testing.T, pid int) []string {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "stateguard-capture-*"))
	var out []string
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "owner.pid")); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(pid) {
			out = append(out, d)
		}
	}
	return out
}
