package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Ino)
}

// The writer is a current holder of main, wal and shm; after a
// rename-over it holds an orphan main and the exit code is 3.
func TestStatusStandaloneWriter(t *testing.T) {
	home := t.TempDir()
	db := filepath.Join(home, "state.db")
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, Rate: 200})
	vars := noDaemon(t)

	r := ctl(t, vars, "status", "--json", "--home", home)
	st := decodeStatus(t, r)
	if st.Daemon.Running || st.Daemon.Error != "daemon not running" || st.Daemon.Socket != vars[socketEnv] {
		t.Errorf("daemon = %+v, want not running on %s", st.Daemon, vars[socketEnv])
	}
	if len(st.Stores) != 1 {
		t.Fatalf("stores = %+v, want only %s", st.Stores, db)
	}
	s := storeOf(t, st, db)
	if s.Profile != store.DefaultProfile || s.Kind != "hermes" {
		t.Errorf("store = %s/%s, want default/hermes", s.Profile, s.Kind)
	}
	if s.Generation.Main.Ino != inode(t, db) || s.Generation.WAL.Ino != inode(t, db+"-wal") || s.Generation.SHM.Ino != inode(t, db+"-shm") {
		t.Errorf("generation %+v does not match the files at the path", s.Generation)
	}
	if s.Generation.WALSalts == "" {
		t.Errorf("no WAL salts for a live WAL")
	}
	p := holderOf(s, w.Pid)
	if p == nil {
		t.Fatalf("writer %d not among the holders %+v", w.Pid, s.Holders)
	}
	if got := heldRoles(p); len(got) != 3 || !got[holders.RoleMain] || !got[holders.RoleWAL] || !got[holders.RoleSHM] {
		t.Fatalf("writer holds %v, want main, wal and shm, all current", got)
	}
	if s.Verdict != holders.VerdictHeld || s.Orphans != 0 || s.Rule != holders.RuleLocks || st.VersionMinor != 1 {
		t.Errorf("verdict %s (rule %s, version minor %d) with %d orphans, want held by rule locks with none",
			s.Verdict, s.Rule, st.VersionMinor, s.Orphans)
	}
	// As root here, PID 1 cannot be inspected but holds no lock on the
	// store: the locks rule clears it, and a live writer with no orphan
	// exits 0.
	if os.Geteuid() == 0 && (r.code != exitOK || len(s.Blind) != 0) {
		t.Errorf("exit %d, blind %+v: want 0 and none", r.code, s.Blind)
	}
	if r.code != wantExit(st) {
		t.Errorf("exit %d, want %d (blind %v)", r.code, wantExit(st), s.Blind)
	}
	if p.Access != holders.AccessWrite || !p.Inspected {
		t.Errorf("writer access %s inspected %v", p.Access, p.Inspected)
	}
	for _, f := range p.Files {
		if !slices.Contains(f.Evidence, holders.EvidenceFD) || f.HostPath != f.Path || f.Match != holders.MatchInode {
			t.Errorf("file %+v: want fd evidence, matched by inode, one path", f)
		}
		if f.Role != holders.RoleWAL && !slices.Contains(f.Evidence, holders.EvidenceLock) {
			t.Errorf("%s: the writer's SQLite locks are not evidence: %+v", f.Role, f)
		}
	}

	txt := ctl(t, vars, "status", "--home", home)
	for _, want := range []string{db, fmt.Sprintf("main ino %d", inode(t, db)), "salts " + s.Generation.WALSalts,
		fmt.Sprintf("%d", w.Pid), "main,wal,shm", "current", "daemon not running", "rule locks", "fd,map,lock", db + "-shm"} {
		if !strings.Contains(txt.stdout, want) {
			t.Errorf("status text lacks %q:\n%s", want, txt.stdout)
		}
	}
	if txt.code != r.code {
		t.Errorf("text exit %d, json exit %d", txt.code, r.code)
	}
	if s.Uninspected.Count > 0 && !strings.Contains(txt.stdout, "not inspected: "+s.Uninspected.Summary) {
		t.Errorf("status text lacks the summary %q:\n%s", s.Uninspected.Summary, txt.stdout)
	}
	if pid1Hidden() {
		strict := filepath.Join(t.TempDir(), "agent.toml")
		writeFile(t, strict, "verdict = \"strict\"\n")
		sr := ctl(t, vars, "status", "--json", "--home", home, "--config", strict)
		if sst := storeOf(t, decodeStatus(t, sr), db); sr.code != exitRefused || sst.Rule != holders.RuleStrict ||
			!slices.ContainsFunc(sst.Blind, func(b holders.Blind) bool { return b.Pid == 1 }) {
			t.Errorf("strict rule: exit %d, rule %s, blind %+v: want 3 with pid 1 listed", sr.code, sst.Rule, sst.Blind)
		}
	}

	hl := ctl(t, vars, "holders", "--home", home)
	want := fmt.Sprintf("default %d %s main,wal,shm current %s", w.Pid, p.User, strings.Join(p.Cmdline, " "))
	if strings.TrimSpace(hl.stdout) != want {
		t.Errorf("holders printed\n%q\nwant\n%q", hl.stdout, want)
	}

	renameFreshOver(t, db)
	r = ctl(t, vars, "status", "--json", "--home", home)
	st = decodeStatus(t, r)
	s = storeOf(t, st, db)
	p = holderOf(s, w.Pid)
	if p == nil {
		t.Fatalf("writer %d not a holder after the rename-over: %+v", w.Pid, s.Holders)
	}
	if got := heldRoles(p); got[holders.RoleMain] || got[holders.RoleWAL] || got[holders.RoleSHM] || len(got) != 3 {
		t.Fatalf("after rename-over and sidecar removal the writer holds %v, want all three orphaned", got)
	}
	if s.Orphans != 1 {
		t.Errorf("orphans = %d, want 1", s.Orphans)
	}
	if r.code != exitRefused {
		t.Errorf("exit %d with an orphan holder, want %d", r.code, exitRefused)
	}
	txt = ctl(t, vars, "status", "--home", home)
	if !strings.Contains(txt.stdout, "ORPHAN (main,wal,shm)") || txt.code != exitRefused {
		t.Errorf("status text (exit %d) does not flag the orphan:\n%s", txt.code, txt.stdout)
	}
	hl = ctl(t, vars, "holders", "--home", home)
	if !strings.HasPrefix(hl.stdout, fmt.Sprintf("default %d %s main,wal,shm orphan ", w.Pid, p.User)) || hl.code != exitRefused {
		t.Errorf("holders (exit %d) printed %q", hl.code, hl.stdout)
	}
}

// A store nobody holds is clear, or unknown when a process could not be
// inspected (always so here); never clear with blind processes, and the
// exit code follows.
func TestStatusUnheldStore(t *testing.T) {
	db := hermestest.NewStore(t)
	home := filepath.Dir(db)
	r := ctl(t, noDaemon(t), "status", "--json", "--home", home)
	st := decodeStatus(t, r)
	s := storeOf(t, st, db)
	if len(s.Holders) != 0 {
		t.Fatalf("holders of an unopened store: %+v", s.Holders)
	}
	switch {
	case len(s.Blind) > 0 && s.Verdict != holders.VerdictUnknown:
		t.Fatalf("verdict %s with uninspected processes %v, want unknown", s.Verdict, s.Blind)
	case len(s.Blind) == 0 && s.Verdict != holders.VerdictClear:
		t.Fatalf("verdict %s with every process inspected, want clear", s.Verdict)
	}
	if s.Verdict == holders.VerdictUnknown && r.code != exitRefused {
		t.Fatalf("exit %d with an unknown verdict, want 3", r.code)
	}
	if r.code != wantExit(st) {
		t.Fatalf("exit %d, want %d", r.code, wantExit(st))
	}
	if os.Geteuid() == 0 && (s.Verdict != holders.VerdictClear || r.code != exitOK) {
		t.Fatalf("as root nothing uninspected holds a lock on the store: verdict %s exit %d, want clear and 0 (%+v)", s.Verdict, r.code, s.Blind)
	}
	txt := ctl(t, noDaemon(t), "status", "--home", home)
	if len(s.Blind) > 0 && !strings.Contains(txt.stdout, "not inspected") {
		t.Errorf("status text does not list the uninspected processes:\n%s", txt.stdout)
	}
}

func TestStatusExitCode(t *testing.T) {
	cur := holders.Process{Pid: 10, Files: []holders.Held{{Role: holders.RoleMain, Current: true}}}
	orphan := holders.Process{Pid: 11, Files: []holders.Held{{Role: holders.RoleMain, Current: true}, {Role: holders.RoleWAL}}}
	blind := []holders.Blind{{Pid: 1, Reason: "permission denied"}}
	for _, tc := range []struct {
		name   string
		stores []control.StoreStatus
		want   int
	}{
		{"no stores", nil, exitOK},
		{"clear", []control.StoreStatus{{Verdict: holders.VerdictClear}}, exitOK},
		{"held by current", []control.StoreStatus{{Verdict: holders.VerdictHeld, Holders: []holders.Process{cur}}}, exitOK},
		{"clear and held", []control.StoreStatus{{Verdict: holders.VerdictClear}, {Verdict: holders.VerdictHeld, Holders: []holders.Process{cur}}}, exitOK},
		{"orphan", []control.StoreStatus{{Verdict: holders.VerdictHeld, Holders: []holders.Process{cur, orphan}, Orphans: 1}}, exitRefused},
		{"orphan not counted", []control.StoreStatus{{Verdict: holders.VerdictHeld, Holders: []holders.Process{orphan}}}, exitRefused},
		{"unknown", []control.StoreStatus{{Verdict: holders.VerdictClear}, {Verdict: holders.VerdictUnknown, Blind: blind}}, exitRefused},
		{"held, some not inspected", []control.StoreStatus{{Verdict: holders.VerdictHeld, Holders: []holders.Process{cur}, Blind: blind}}, exitRefused},
		{"no verdict", []control.StoreStatus{{}}, exitRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := statusExit(control.Status{Stores: tc.stores}); got != tc.want {
				t.Fatalf("statusExit = %d, want %d", got, tc.want)
			}
		})
	}
}

// --home counts only the given homes; --profile narrows the stores and
// the problems; a symlinked state.db is reported, not followed.
func TestStatusFilters(t *testing.T) {
	home := t.TempDir()
	for _, p := range []string{"state.db", "profiles/work/state.db", "profiles/play/state.db"} {
		path := filepath.Join(home, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := hermestest.CreateStore(path); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(home, "profiles", "bad"), 0o700)
	if err := os.Symlink(filepath.Join(home, "state.db"), filepath.Join(home, "profiles", "bad", "state.db")); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := hermestest.CreateStore(filepath.Join(other, "state.db")); err != nil {
		t.Fatal(err)
	}
	vars := noDaemon(t)
	vars["HERMES_HOME"] = other // --home must not add it

	st := decodeStatus(t, ctl(t, vars, "status", "--json", "--home", home))
	var got []string
	for _, s := range st.Stores {
		got = append(got, s.Profile)
	}
	if strings.Join(got, " ") != "default play work" {
		t.Errorf("profiles %v, want default play work of %s only", got, home)
	}
	if len(st.Problems) != 1 || !strings.HasSuffix(st.Problems[0].Path, "profiles/bad/state.db") {
		t.Errorf("problems %+v, want the symlinked profile bad", st.Problems)
	}

	st = decodeStatus(t, ctl(t, vars, "status", "--json", "--home", home, "--profile", "work"))
	if len(st.Stores) != 1 || st.Stores[0].Profile != "work" || len(st.Problems) != 0 {
		t.Errorf("--profile work: stores %+v problems %+v", st.Stores, st.Problems)
	}
	st = decodeStatus(t, ctl(t, vars, "status", "--json", "--home", home, "--profile", "bad"))
	if len(st.Stores) != 0 || len(st.Problems) != 1 {
		t.Errorf("--profile bad: stores %+v problems %+v", st.Stores, st.Problems)
	}
	r := ctl(t, vars, "status", "--home", home, "--profile", "bad")
	if !strings.Contains(r.stdout, "No stores found.") || !strings.Contains(r.stdout, "Problems:") || !strings.Contains(r.stdout, "profiles/bad/state.db") {
		t.Errorf("text output:\n%s", r.stdout)
	}

	st = decodeStatus(t, ctl(t, vars, "status", "--json", "--home", home, "--home", other, "--profile", "default"))
	if len(st.Stores) != 2 {
		t.Errorf("two homes, default profile: %+v", st.Stores)
	}

	missing := filepath.Join(t.TempDir(), "nope")
	r = ctl(t, vars, "status", "--json", "--home", missing)
	st = decodeStatus(t, r)
	if len(st.Stores) != 0 || len(st.Problems) != 1 || !strings.Contains(st.Problems[0].Hint, "--home "+missing) || r.code != exitOK {
		t.Errorf("missing home: exit %d, %+v", r.code, st)
	}

	if r := ctl(t, vars, "status", "extra"); r.code != exitUsage {
		t.Errorf("status with an argument: exit %d", r.code)
	}
	if r := ctl(t, vars, "status", "--help"); r.code != exitOK || !strings.Contains(r.stdout, "usage: agentctl status") {
		t.Errorf("status --help: exit %d %q", r.code, r.stdout)
	}
}
