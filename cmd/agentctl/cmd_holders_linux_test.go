package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/supervisor"
)

func decodeHolders(t *testing.T, r ctlResult) holdersJSON {
	t.Helper()
	var h holdersJSON
	if err := json.Unmarshal([]byte(r.stdout), &h); err != nil {
		t.Fatalf("holders --json (exit %d): %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	if h.Version != 1 || h.VersionMinor != 1 {
		t.Fatalf("holders document version %d.%d", h.Version, h.VersionMinor)
	}
	return h
}

func holderLineOf(h holdersJSON, pid int) *holderLine {
	for i := range h.Holders {
		if h.Holders[i].Pid == pid {
			return &h.Holders[i]
		}
	}
	return nil
}

// A main renamed aside under a live writer (`mv state.db x`) shows in
// agentctl holders as an orphan holder of main: without agentd, found by
// the writer's SQLite lock on the file it uses as main; with agentd (which
// remembers the generation's inodes), by inode.
func TestHoldersRenamedMainIsOrphan(t *testing.T) {
	home := t.TempDir()
	db := filepath.Join(home, "state.db")
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, Rate: 100})
	moved := filepath.Join(home, "x")
	if err := os.Rename(db, moved); err != nil {
		t.Fatal(err)
	}
	vars := noDaemon(t)
	check := func(r ctlResult, match holders.Match) {
		t.Helper()
		h := decodeHolders(t, r)
		l := holderLineOf(h, w.Pid)
		if l == nil || !l.Orphan || !slices.Equal(l.OrphanRoles, []string{"main"}) || r.code != exitRefused {
			t.Fatalf("exit %d, writer %+v: want an orphan holder of main, exit 3", r.code, l)
		}
		i := slices.IndexFunc(l.Files, func(f holders.Held) bool { return f.Role == holders.RoleMain })
		if m := l.Files[i]; m.HostPath != moved || m.Current || m.Match != match || m.Access != holders.AccessWrite {
			t.Errorf("main %+v, want the orphan at %s matched by %s", m, moved, match)
		}
	}
	check(ctl(t, vars, "holders", "--json", "--home", home), holders.MatchSQLite)
	txt := ctl(t, vars, "holders", "--files", "--home", home)
	lines := strings.Split(strings.TrimSpace(txt.stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], fmt.Sprintf("default %d root main,wal,shm orphan ", w.Pid)) ||
		!strings.Contains(txt.stdout, "    main orphan fd=") || !strings.Contains(txt.stdout, "host="+moved+" holder="+moved) {
		t.Errorf("holders --files printed:\n%s", txt.stdout)
	}

	// agentd, told to only watch (observe), keeps the writer running.
	if err := os.Rename(moved, db); err != nil {
		t.Fatal(err)
	}
	a, _, _ := startAgent(t, home, func(o *supervisor.Options) {
		o.Policies = incident.PolicySet{Replaced: incident.PolicyObserve,
			SidecarLost: incident.PolicyObserve, Mispaired: incident.PolicyObserve}
	})
	vars = map[string]string{socketEnv: a.SocketPath()}
	if r := ctl(t, vars, "holders", "--json"); r.code != exitOK || holderLineOf(decodeHolders(t, r), w.Pid) == nil {
		t.Fatalf("before the move: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if err := os.Rename(db, moved); err != nil {
		t.Fatal(err)
	}
	var r ctlResult
	hermestest.Eventually(t, "agentd to see the orphan main", 10*time.Second, func() bool {
		r = ctl(t, vars, "holders", "--json")
		l := holderLineOf(decodeHolders(t, r), w.Pid)
		return l != nil && slices.Contains(l.OrphanRoles, "main")
	})
	check(r, holders.MatchInode)
}

// addUser creates a user for one test and returns its uid.
func addUser(t *testing.T, name string) uint32 {
	t.Helper()
	uid, _ := hermestest.AddUser(t, name)
	return uint32(uid)
}

// A normal user, on a store of their own with their own writer: exit 0,
// the writer listed, and the processes they cannot inspect (root's
// daemons, and no kernel thread at all) summarized in one line.
func TestStatusAsUnprivilegedUser(t *testing.T) {
	uid := addUser(t, "sgh-status-alice")
	base, bin := agentctlForAll(t, "sgh-status-")
	userHome := filepath.Join(base, "alice")
	hermes := filepath.Join(userHome, ".hermes")
	if err := os.MkdirAll(hermes, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{userHome, hermes} {
		if err := os.Chown(d, int(uid), int(uid)); err != nil {
			t.Fatal(err)
		}
	}
	cred := &syscall.Credential{Uid: uid, Gid: uid}
	db := filepath.Join(hermes, "state.db")
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, Rate: 50,
		Ack: filepath.Join(userHome, "ack"), Credential: cred})
	run := func(args ...string) (int, string, string) {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"HOME=" + userHome, "PATH=/usr/bin:/bin", socketEnv + "=" + filepath.Join(userHome, "no.sock")}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}
	code, out, errs := run("status", "--json", "--home", hermes)
	st := decodeStatus(t, ctlResult{code, out, errs})
	s := storeOf(t, st, db)
	if code != exitOK || s.Verdict != holders.VerdictHeld || len(s.Holders) != 1 || holderOf(s, w.Pid) == nil || len(s.Blind) != 0 {
		t.Fatalf("exit %d verdict %s holders %+v blind %+v: want 0, held by the writer alone, none listed", code, s.Verdict, s.Holders, s.Blind)
	}
	if s.Uninspected.Count == 0 || slices.ContainsFunc(s.Uninspected.Pids, isKernelThread) {
		t.Errorf("uninspected %+v: want root's processes, no kernel thread", s.Uninspected)
	}
	code, out, _ = run("status", "--home", hermes)
	// (The count moves between two runs as processes come and go.)
	if code != exitOK || !strings.Contains(out, " processes of other users not inspected; none holds a lock on this store") ||
		strings.Contains(out, "not inspected (could open") || !strings.Contains(out, strconv.Itoa(w.Pid)) {
		t.Errorf("status text (exit %d):\n%s", code, out)
	}
	code, out, errs = run("holders", "--home", hermes)
	if code != exitOK || !strings.HasPrefix(out, fmt.Sprintf("default %d %s main,wal,shm current ", w.Pid, hermestest.UserName(t, int(uid)))) ||
		!strings.Contains(errs, "of other users not inspected; none holds a lock on this store (rule locks)") {
		t.Errorf("holders (exit %d):\n%s\n%s", code, out, errs)
	}
}

func isKernelThread(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	flags, _ := strconv.ParseUint(f[6], 10, 64)
	return flags&0x00200000 != 0
}

// agentctlForAll builds agentctl into a new directory (named by prefix,
// removed at cleanup) that every user may enter, for tests that run it
// as another user; it returns the directory and the binary.
func agentctlForAll(t *testing.T, prefix string) (base, bin string) {
	t.Helper()
	base, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(base, "agentctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build agentctl: %v\n%s", err, out)
	}
	return base, bin
}
