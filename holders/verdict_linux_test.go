package holders

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// sharedStore creates a root-owned store (no sidecars: nobody has it
// open) that nobody may read (0644 in a 0755 directory), so nobody's
// processes could hold it too and count for it.
func sharedStore(t *testing.T) string {
	t.Helper()
	db := hermestest.NewStore(t)
	openUp(t, filepath.Dir(db))
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		if err := os.Chmod(p, 0o644); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return db
}

func blindPid(s *StoreResult, pid int) *Blind {
	for i := range s.Blind {
		if s.Blind[i].Pid == pid {
			return &s.Blind[i]
		}
	}
	return nil
}

func lockOnly(t *testing.T, p *Process) {
	t.Helper()
	if p.Inspected {
		t.Errorf("pid %d inspected, want known by lock evidence only", p.Pid)
	}
	for _, f := range p.Files {
		if !slices.Equal(f.Evidence, []Evidence{EvidenceLock}) || f.FD != -1 || f.Path != "" {
			t.Errorf("pid %d %s: %+v, want lock evidence only", p.Pid, f.Role, f)
		}
	}
	if p.StartTicks == 0 {
		t.Errorf("pid %d has no start time: it could not be signalled safely", p.Pid)
	}
}

// A SQLite writer the scan cannot inspect (root's, scanned by nobody) is
// a holder by its locks: main and shm, current; after a rename-over, the
// scan that remembers the old generation (a Cache, as agentd's) sees it
// as an orphan holder of main, and after the sidecars go too, of all it
// locks.
func TestLockEvidenceFindsUninspectableWriter(t *testing.T) {
	requireRoot(t)
	db := filepath.Join(t.TempDir(), "state.db")
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, Rate: 50})
	openUp(t, filepath.Dir(db))
	sess := startScanSession(t, nobody, RuleLocks, db)
	s := &sess.scan().Stores[0]
	if s.Verdict != VerdictHeld || len(s.Holders) != 1 || len(s.Blind) != 0 {
		t.Fatalf("verdict %s holders %+v blind %+v: want held by the writer alone", s.Verdict, s.Holders, s.Blind)
	}
	before := s.Current
	p := holder(t, s, w.Pid)
	lockOnly(t, p)
	got := byRole(p)
	if len(got) != 2 || !got[RoleMain].Current || !got[RoleSHM].Current || got[RoleMain].ID != before.Of(RoleMain).ID {
		t.Fatalf("writer seen holding %+v, want main and shm, current", p.Files)
	}
	if p.MayWrite() == false || p.User != "root" || !slices.Contains(p.Cmdline, db) {
		t.Errorf("access %s user %q cmdline %q", p.Access, p.User, p.Cmdline)
	}
	if s.Uninspected.Count == 0 || slices.Contains(s.Uninspected.Pids, w.Pid) {
		t.Errorf("uninspected %+v: want root's other processes, not the writer", s.Uninspected)
	}

	hermestest.RenameFreshOver(t, db)
	s = &sess.scan().Stores[0]
	p = holder(t, s, w.Pid)
	lockOnly(t, p)
	got = byRole(p)
	if m := got[RoleMain]; m.Current || m.ID != before.Of(RoleMain).ID || !got[RoleSHM].Current || !p.Orphan() {
		t.Fatalf("after the rename-over: %+v, want an orphan main %v and the current shm", p.Files, before.Of(RoleMain).ID)
	}
	if len(s.Orphans()) != 1 {
		t.Errorf("orphans %+v", s.Orphans())
	}

	removeSidecars(t, db)
	s = &sess.scan().Stores[0]
	got = byRole(holder(t, s, w.Pid))
	if got[RoleMain].Current || got[RoleSHM].Current || got[RoleSHM].ID != before.Of(RoleSHM).ID {
		t.Fatalf("after the sidecars went: %+v, want every inode orphaned", got)
	}
}

// A writer of the scan's own user that made itself undumpable cannot be
// inspected either; its locks still show it.
func TestLockEvidenceFindsUndumpableOwnWriter(t *testing.T) {
	db, w := startNobodyWriter(t, true)
	for _, rule := range []Rule{RuleLocks, RuleStrict} {
		s := scanAs(t, nobody, rule, db)
		p := holder(t, s, w.Pid)
		lockOnly(t, p)
		if s.Verdict != VerdictHeld || blindPid(s, w.Pid) != nil {
			t.Errorf("%s: verdict %s, blind %+v", rule, s.Verdict, s.Blind)
		}
	}
}

// A process of another user that holds the store open but holds no lock
// (no SQLite connection in WAL mode): the locks rule clears it with the
// summary, the strict rule says unknown.
func TestLocklessUninspectableProcess(t *testing.T) {
	requireRoot(t)
	db := sharedStore(t)
	pid := holdFiles(t, holdOptions{}, db) // root's: nobody cannot inspect it
	s := scanAs(t, nobody, RuleLocks, db)
	if s.Verdict != VerdictClear || len(s.Blind) != 0 || !slices.Contains(s.Uninspected.Pids, pid) {
		t.Fatalf("locks rule: verdict %s blind %+v uninspected %+v: want clear, pid %d summarized", s.Verdict, s.Blind, s.Uninspected, pid)
	}
	if !strings.HasSuffix(s.Uninspected.Summary, "processes of other users not inspected; none holds a lock on this store") {
		t.Errorf("summary %q", s.Uninspected.Summary)
	}
	noKernelThreads(t, s)
	s = scanAs(t, nobody, RuleStrict, db)
	if b := blindPid(s, pid); s.Verdict != VerdictUnknown || b == nil || b.Scope != ScopeOtherUser || b.UID != 0 {
		t.Fatalf("strict rule: verdict %s blind %+v: want unknown with pid %d listed", s.Verdict, s.Blind, pid)
	}
	noKernelThreads(t, s)
}

// A process of the scan's own user that it cannot inspect (undumpable)
// and that holds no lock still makes the verdict unknown, under either
// rule.
func TestOwnUserUninspectableCountsUnderEveryRule(t *testing.T) {
	requireRoot(t)
	db := sharedStore(t)
	pid := holdFiles(t, holdOptions{nondumpable: true, cred: &syscall.Credential{Uid: nobody, Gid: nobody}}, db)
	for _, rule := range []Rule{RuleLocks, RuleStrict} {
		s := scanAs(t, nobody, rule, db)
		b := blindPid(s, pid)
		if s.Verdict != VerdictUnknown || b == nil || b.Scope != ScopeOwnUser {
			t.Errorf("%s: verdict %s blind %+v: want unknown with own-user pid %d", rule, s.Verdict, s.Blind, pid)
		}
	}
}

// OFD locks carry no pid in /proc/locks. One the scan can attribute (to
// an inspected process, or to itself) changes nothing; one it cannot (a
// process it may not inspect) keeps the locks rule from clearing anyone,
// even when an inspected process holds an identical lock through two fds
// of one open file description.
func TestUnattributedOFDLock(t *testing.T) {
	requireRoot(t)
	db := sharedStore(t)
	mine := holdFiles(t, holdOptions{ofd: true, dup: true, cred: &syscall.Credential{Uid: nobody, Gid: nobody}}, db)
	s := scanAs(t, nobody, RuleLocks, db)
	if s.Verdict != VerdictHeld || len(s.Blind) != 0 || s.RuleNote != "" {
		t.Fatalf("only an inspected process's OFD lock: verdict %s blind %+v note %q", s.Verdict, s.Blind, s.RuleNote)
	}
	if f := byRole(holder(t, s, mine))[RoleMain]; f.FD < 0 || f.Access != AccessRead {
		t.Errorf("nobody's holder: %+v", f)
	}
	root := holdFiles(t, holdOptions{ofd: true}, db)
	s = scanAs(t, nobody, RuleLocks, db)
	if s.Verdict != VerdictHeld || s.RuleNote == "" || blindPid(s, root) == nil ||
		!slices.ContainsFunc(s.Blind, func(b Blind) bool { return b.Scope == ScopeScan && strings.Contains(b.Reason, "OFD") }) {
		t.Fatalf("a root process's OFD lock: verdict %s note %q blind %+v: want the rule unable to clear", s.Verdict, s.RuleNote, s.Blind)
	}
	// Root inspects both; OFD locks of this very process are its own,
	// two identical ones through two opens (as a guard and a pin hold
	// them) are told apart by kcmp and both accounted for.
	for range 2 {
		f, err := os.Open(db)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := LockMainShared(f); err != nil {
			t.Fatal(err)
		}
	}
	rs := scanOne(t, db)
	if len(rs.Blind) != 0 || rs.RuleNote != "" || len(rs.Holders) != 2 {
		t.Fatalf("root scan: blind %+v note %q holders %+v", rs.Blind, rs.RuleNote, rs.Holders)
	}
}

// Under hidepid=invisible an unprivileged scan does not even list other
// users' processes (nor its own undumpable ones). A SQLite writer among
// them is still seen by its locks, by pid alone; and the hidden ones
// make the verdict unknown under every rule.
func TestHidepidScan(t *testing.T) {
	requireRoot(t)
	unshare, err1 := exec.LookPath("unshare")
	setpriv, err2 := exec.LookPath("setpriv")
	if err1 != nil || err2 != nil {
		t.Skip("needs unshare and setpriv (util-linux)")
	}
	db := filepath.Join(t.TempDir(), "state.db")
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, Rate: 50})
	openUp(t, filepath.Dir(db))
	idle := sharedStore(t)
	// A proc instance of its own, mounted hidepid=invisible in a mount
	// namespace of the scan's alone, then the scan as nobody.
	script := `mount -t proc -o hidepid=invisible proc /proc && exec "$@"`
	bin := helperBinary(t)
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh",
		setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), scanHelperEnv+"="+db+":"+idle, scanRuleEnv+"="+string(RuleLocks))
	cmd.Stdin = strings.NewReader("scan\n")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("a hidepid scan could not run here: %v", err)
	}
	var res Result
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	s := res.Store(db)
	p := holder(t, s, w.Pid)
	if p.Inspected || p.StartTicks != 0 || len(p.Files) != 2 || s.Verdict != VerdictHeld {
		t.Errorf("hidden writer %+v, verdict %s: want a holder by its locks, known by pid only", p, s.Verdict)
	}
	for _, st := range []*StoreResult{s, res.Store(idle)} {
		if !slices.ContainsFunc(st.Blind, func(b Blind) bool { return b.Scope == ScopeScan && strings.Contains(b.Reason, "hidepid") }) {
			t.Errorf("%s: blind %+v, want the hidepid gap counted", st.Target.Path, st.Blind)
		}
	}
	if v := res.Store(idle).Verdict; v != VerdictUnknown {
		t.Errorf("a store nobody holds, under hidepid: %s, want unknown", v)
	}
}
