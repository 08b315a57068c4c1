package holders

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// startStore runs the test writer on a new store and returns its path.
func startStore(t *testing.T) (string, *hermestest.Writer) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "state.db")
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, Rate: 50})
	return db, w
}

func scanOne(t *testing.T, db string) *StoreResult {
	t.Helper()
	res, err := Scan([]Target{{Path: db}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stores) != 1 {
		t.Fatalf("%d store results, want 1", len(res.Stores))
	}
	return &res.Stores[0]
}

func holder(t *testing.T, s *StoreResult, pid int) *Process {
	t.Helper()
	for i := range s.Holders {
		if s.Holders[i].Pid == pid {
			return &s.Holders[i]
		}
	}
	t.Fatalf("pid %d is not a holder of %s; holders: %+v", pid, s.Target.Path, s.Holders)
	return nil
}

func byRole(p *Process) map[Role]Held {
	m := make(map[Role]Held)
	for _, h := range p.Files {
		m[h.Role] = h
	}
	return m
}

// wantHeld checks p holds exactly the roles in want, each current or
// orphan as want says, and every orphan is what was at the path before.
func wantHeld(t *testing.T, p *Process, want map[Role]bool, before *Files) {
	t.Helper()
	got := byRole(p)
	if len(got) != len(want) {
		t.Fatalf("pid %d holds %+v, want roles %v", p.Pid, p.Files, want)
	}
	for r, current := range want {
		h, ok := got[r]
		if !ok {
			t.Fatalf("pid %d does not hold %s: %+v", p.Pid, r, p.Files)
		}
		if h.Current != current {
			t.Errorf("pid %d %s: current=%v, want %v (%+v)", p.Pid, r, h.Current, current, h)
		}
		if h.ID != before.Of(r).ID {
			t.Errorf("pid %d %s: holds %v, the writer opened %v", p.Pid, r, h.ID, before.Of(r).ID)
		}
		if !current && h.Nlink != 0 {
			t.Errorf("pid %d %s: orphan has nlink %d, want 0", p.Pid, r, h.Nlink)
		}
	}
	wantOrphan := slices.Contains(mapsValues(want), false)
	if p.Orphan() != wantOrphan {
		t.Errorf("Orphan() = %v, want %v", p.Orphan(), wantOrphan)
	}
}

func mapsValues(m map[Role]bool) []bool {
	var v []bool
	for _, b := range m {
		v = append(v, b)
	}
	return v
}

func TestScanWriterIsCurrentHolder(t *testing.T) {
	db, w := startStore(t)
	s := scanOne(t, db)
	if s.Verdict != VerdictHeld {
		t.Fatalf("verdict %s, want held; %+v", s.Verdict, s)
	}
	if len(s.Holders) != 1 {
		t.Fatalf("holders %+v, want only the writer %d", s.Holders, w.Pid)
	}
	p := holder(t, s, w.Pid)
	wantHeld(t, p, map[Role]bool{RoleMain: true, RoleWAL: true, RoleSHM: true}, s.Current)
	files := byRole(p)
	if shm := files[RoleSHM]; shm.FD < 0 || !shm.Mapped {
		t.Errorf("shm should be held by fd and mmap: %+v", shm)
	}
	if m := files[RoleMain]; m.FD < 0 || m.Nlink != 1 || m.Path != db {
		t.Errorf("main: %+v, want an fd, nlink 1, path %s", m, db)
	}
	st, err := readStat(w.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if p.StartTicks != st.StartTicks || p.StartTime.IsZero() {
		t.Errorf("start ticks %d time %v, /proc says %d", p.StartTicks, p.StartTime, st.StartTicks)
	}
	if p.UID != 0 || p.User != "root" || !strings.HasSuffix(p.Exe, "/writer") ||
		len(p.Cmdline) == 0 || !slices.Contains(p.Cmdline, db) {
		t.Errorf("metadata uid=%d user=%q exe=%q cmdline=%q", p.UID, p.User, p.Exe, p.Cmdline)
	}
	for _, r := range Roles {
		if !s.Current.Of(r).Exists {
			t.Errorf("%s should exist: %+v", r, s.Current.Of(r))
		}
	}

	// The same facts through the other maps reader (text or ioctl).
	prev := procmapQuery.Load()
	if prev >= 0 {
		procmapQuery.Store(-1)
	} else {
		procmapQuery.Store(0)
	}
	other := scanOne(t, db)
	procmapQuery.Store(prev)
	if got, want := byRole(holder(t, other, w.Pid)), files; !reflect.DeepEqual(got, want) {
		t.Errorf("maps reader %d gives %+v, the other %+v", prev, got, want)
	}
}

func TestScanStoreWithoutWriterIsClear(t *testing.T) {
	db := hermestest.NewStore(t)
	// A process holding some other file in the same directory is no holder.
	other, err := os.Create(filepath.Join(filepath.Dir(db), "notes.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	holdInSleep(t, other)

	s := scanOne(t, db)
	if len(s.Holders) != 0 {
		t.Fatalf("holders %+v, want none", s.Holders)
	}
	// Clear only if every process could be inspected. Some hosts run a
	// process even root cannot inspect (here: a pid 1 with capabilities
	// outside our bounding set); then the only honest answer is unknown.
	if len(s.Blind) == 0 {
		if s.Verdict != VerdictClear {
			t.Fatalf("nothing blind, no holder, verdict %s", s.Verdict)
		}
	} else {
		if s.Verdict != VerdictUnknown {
			t.Fatalf("blind %+v but verdict %s", s.Blind, s.Verdict)
		}
		for _, b := range s.Blind {
			if b.Pid <= 0 || !uninspectable(b.Pid) {
				t.Errorf("blind entry %+v is inspectable", b)
			}
		}
		t.Logf("clear unreachable on this host, uninspectable: %+v", s.Blind)
	}
	if !s.Current.Of(RoleMain).Exists || s.Current.Of(RoleWAL).Exists {
		t.Errorf("current: %+v", s.Current)
	}
}

// uninspectable reports whether this process cannot read pid's fd links.
func uninspectable(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return errors.Is(err, os.ErrPermission)
	}
	for _, e := range ents {
		if _, err := os.Readlink(filepath.Join(dir, e.Name())); errors.Is(err, os.ErrPermission) {
			return true
		}
	}
	return false
}

func removeSidecars(t *testing.T, db string) {
	t.Helper()
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Remove(db + suffix); err != nil {
			t.Fatal(err)
		}
	}
}

func TestScanRenameOverMakesMainOrphan(t *testing.T) {
	db, w := startStore(t)
	before := scanOne(t, db).Current
	hermestest.RenameFreshOver(t, db)
	s := scanOne(t, db)
	if s.Current.Of(RoleMain).ID == before.Of(RoleMain).ID {
		t.Fatal("rename-over did not change main's identity")
	}
	wantHeld(t, holder(t, s, w.Pid), map[Role]bool{RoleMain: false, RoleWAL: true, RoleSHM: true}, before)
	if s.Verdict != VerdictHeld || len(s.Orphans()) != 1 {
		t.Errorf("verdict %s orphans %d", s.Verdict, len(s.Orphans()))
	}
}

func TestScanRestoreMakesAllThreeOrphans(t *testing.T) {
	db, w := startStore(t)
	before := scanOne(t, db).Current
	hermestest.RenameFreshOver(t, db)
	removeSidecars(t, db)
	s := scanOne(t, db)
	wantHeld(t, holder(t, s, w.Pid), map[Role]bool{RoleMain: false, RoleWAL: false, RoleSHM: false}, before)
	if s.Current.Of(RoleWAL).Exists || s.Current.Of(RoleSHM).Exists {
		t.Errorf("sidecars still at the path: %+v", s.Current)
	}
}

func TestScanUnlinkedSidecarsAreOrphansMainCurrent(t *testing.T) {
	db, w := startStore(t)
	before := scanOne(t, db).Current
	removeSidecars(t, db)
	s := scanOne(t, db)
	wantHeld(t, holder(t, s, w.Pid), map[Role]bool{RoleMain: true, RoleWAL: false, RoleSHM: false}, before)
}

// A process that renamed nothing but holds the store under another name
// (a hard link) still holds the current inode.
func TestScanMatchesByIdentityNotName(t *testing.T) {
	db, w := startStore(t)
	if err := os.Link(db, filepath.Join(filepath.Dir(db), "alias.db")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(filepath.Dir(db), "alias.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pid := holdInSleep(t, f)
	s := scanOne(t, db)
	holder(t, s, w.Pid)
	p := holder(t, s, pid)
	if len(p.Files) != 1 || p.Files[0].Role != RoleMain || !p.Files[0].Current || p.Files[0].FD != 3 || p.Files[0].Nlink != 2 {
		t.Fatalf("alias holder: %+v", p.Files)
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a helper under another uid")
	}
}

// An unprivileged user still sees its own processes: a writer running as
// nobody is reported held; root's processes, which it cannot inspect and
// which hold no lock on the store, are summarized, not listed.
func TestUnprivilegedScanSeesOwnWriter(t *testing.T) {
	db, w := startNobodyWriter(t, false)
	s := scanAs(t, nobody, RuleLocks, db)
	if s.Verdict != VerdictHeld || len(s.Holders) != 1 {
		t.Fatalf("verdict %s, want held by the writer alone: %+v", s.Verdict, s)
	}
	p := holder(t, s, w.Pid)
	wantHeld(t, p, map[Role]bool{RoleMain: true, RoleWAL: true, RoleSHM: true}, s.Current)
	if p.UID != nobody || !p.Inspected || p.Access != AccessWrite {
		t.Errorf("uid %d inspected %v access %s", p.UID, p.Inspected, p.Access)
	}
	if len(s.Blind) != 0 {
		t.Errorf("processes listed one by one: %+v", s.Blind)
	}
	if s.Uninspected.Count == 0 || !strings.Contains(s.Uninspected.Summary, "of other users not inspected; none holds a lock on this store") {
		t.Errorf("root's processes are not summarized: %+v", s.Uninspected)
	}
	noKernelThreads(t, s)
	// The strict rule lists them, as before.
	strict := scanAs(t, nobody, RuleStrict, db)
	if strict.Verdict != VerdictHeld || len(strict.Blind) == 0 || strict.Uninspected.Count != 0 {
		t.Errorf("strict: verdict %s, blind %d, summarized %d", strict.Verdict, len(strict.Blind), strict.Uninspected.Count)
	}
	noKernelThreads(t, strict)
}

// A process that mapped the store and closed its fd is still a holder,
// found through /proc/<pid>/maps, by both maps readers.
func TestScanFindsMappingOnlyHolder(t *testing.T) {
	db := hermestest.NewStore(t)
	pid := startMapHelper(t, db)

	before := scanOne(t, db).Current
	hermestest.RenameFreshOver(t, db)
	for _, mode := range []int32{0, -1} {
		prev := procmapQuery.Swap(mode)
		s := scanOne(t, db)
		procmapQuery.Store(prev)
		p := holder(t, s, pid)
		if len(p.Files) != 1 {
			t.Fatalf("mode %d: files %+v", mode, p.Files)
		}
		h := p.Files[0]
		if h.Role != RoleMain || h.FD != -1 || !h.Mapped || h.Current || h.ID != before.Of(RoleMain).ID || h.Nlink != 0 {
			t.Errorf("mode %d: want an orphan mapping of the old main %v, got %+v", mode, before.Of(RoleMain).ID, h)
		}
	}
	if os.Geteuid() == 0 {
		f, err := PinMapped(pid, before.Of(RoleMain).ID)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if b := readAll(t, f); !strings.HasPrefix(string(b), "SQLite format 3\x00") {
			t.Fatalf("pinned mapping is not the old main: %q", b[:16])
		}
	}
}

// A store whose files the scanner cannot even stat cannot be judged.
func TestUnprivilegedScanOfUnreadableStoreIsUnknown(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "private")
	openUp(t, filepath.Dir(dir))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	s := scanAs(t, nobody, RuleLocks, db)
	if s.Verdict != VerdictUnknown {
		t.Fatalf("verdict %s, want unknown", s.Verdict)
	}
	if !slices.ContainsFunc(s.Blind, func(b Blind) bool { return b.Pid == 0 && strings.Contains(b.Reason, "cannot stat") }) {
		t.Fatalf("no stat failure among %+v", s.Blind)
	}
}
