package holders

import (
	"io/fs"
	"slices"
	"testing"

	"github.com/stateguard/stateguard/fileid"
)

func TestCouldOpen(t *testing.T) {
	dir := fileid.State{Exists: true, Mode: fs.ModeDir | 0o755, UID: 1000, GID: 1000}
	private := &Files{{Exists: true, Mode: 0o600, UID: 1000, GID: 1000}}
	group := &Files{{Exists: true, Mode: 0o640, UID: 1000, GID: 50}}
	world := &Files{{Exists: true, Mode: 0o600, UID: 1000}, {Exists: true, Mode: 0o644, UID: 1000}}
	none := &Files{}
	groups := func(g ...int) func() ([]int, bool) { return func() ([]int, bool) { return g, true } }
	unknownGroups := func() ([]int, bool) { return nil, false }
	closedDir := dir
	closedDir.Mode = fs.ModeDir | 0o700

	cases := []struct {
		name  string
		b     blindProc
		dir   fileid.State
		files *Files
		want  bool
	}{
		{"root always", blindProc{Blind: Blind{UID: 0}}, dir, private, true},
		{"unknown uid", blindProc{Blind: Blind{UID: -1}}, dir, private, true},
		{"owner", blindProc{Blind: Blind{UID: 1000}}, dir, private, true},
		{"stranger, private files", blindProc{Blind: Blind{UID: 2000}}, dir, private, false},
		{"stranger, world-readable wal", blindProc{Blind: Blind{UID: 2000}}, dir, world, true},
		{"stranger, dir not searchable", blindProc{Blind: Blind{UID: 2000}}, closedDir, world, false},
		{"group member", blindProc{Blind: Blind{UID: 2000}, groups: groups(7, 50)}, dir, group, true},
		{"not in group", blindProc{Blind: Blind{UID: 2000}, groups: groups(7)}, dir, group, false},
		{"groups unknown", blindProc{Blind: Blind{UID: 2000}, groups: unknownGroups}, dir, group, true},
		{"nothing at the path", blindProc{Blind: Blind{UID: 2000}}, dir, none, true},
		{"dir missing", blindProc{Blind: Blind{UID: 2000}}, fileid.State{}, private, true},
	}
	for _, c := range cases {
		if got := couldOpen(c.b, c.dir, c.files); got != c.want {
			t.Errorf("%s: couldOpen = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestVerdict(t *testing.T) {
	held := StoreResult{Holders: []Process{{Pid: 5}}, Blind: []Blind{{Pid: 1}}}
	blind := StoreResult{Blind: []Blind{{Pid: 1}}}
	if v := verdict(&held); v != VerdictHeld {
		t.Errorf("holders and blind: %s", v)
	}
	if v := verdict(&blind); v != VerdictUnknown {
		t.Errorf("blind only: %s", v)
	}
	if v := verdict(&StoreResult{}); v != VerdictClear {
		t.Errorf("nothing: %s", v)
	}
}

func TestMatchFoldsFdAndMapping(t *testing.T) {
	w := &watch{
		targets: []Target{{Path: "/d/state.db"}},
		base:    []string{"state.db"},
		stats:   []*pathStat{{cur: Files{2: {Exists: true, ID: fileid.ID{Dev: 1, Ino: 30}, Nlink: 1}}}},
		byDir:   map[string][]int{"/d": {0}},
		ids: map[fileid.ID][]idRef{
			{Dev: 1, Ino: 30}: {{store: 0, role: RoleSHM, current: true, path: "/d/state.db-shm"}},
			{Dev: 1, Ino: 40}: {{store: 0, role: RoleMain, path: "/d/state.db"}}, // a known earlier main
		},
		roleBases: map[string]bool{"state.db": true, "state.db-wal": true, "state.db-shm": true},
	}
	hs := w.match([]observation{
		{path: "/d/state.db-shm", fd: -1, mapped: true, id: fileid.ID{Dev: 1, Ino: 30}, own: true, mapWrite: true},
		{path: "/d/state.db-shm", fd: 9, id: fileid.ID{Dev: 1, Ino: 30}, nlink: 1, nlinkKnown: true, own: true},
		{path: "/d/state.db-shm", fd: 5, id: fileid.ID{Dev: 1, Ino: 30}, nlink: 1, nlinkKnown: true, own: true, fdWrite: true},
		{path: "/d/state.db", fd: 4, id: fileid.ID{Dev: 1, Ino: 10}, own: true},       // renamed over: orphan by name
		{path: "/d/other.db", fd: 6, id: fileid.ID{Dev: 1, Ino: 11}, own: true},       // not the store's
		{path: "/e/state.db", fd: 7, id: fileid.ID{Dev: 1, Ino: 12}, own: true},       // not a watched dir
		{path: "/d/state.db-wal", fd: 8, id: fileid.ID{Dev: 1, Ino: 20}, own: true},   // unlinked wal
		{path: "/d/state.db.old", fd: 3, id: fileid.ID{Dev: 1, Ino: 40}, own: true},   // the known main, renamed aside
		{path: "/c/state.db-wal", fd: 11, id: fileid.ID{Dev: 1, Ino: 21}, own: false}, // another namespace, host path unknown
		{path: "/c/x", fd: 12, id: fileid.ID{Dev: 1, Ino: 22}, own: false, host: "/d/state.db-wal"},
	})
	if len(hs) != 5 {
		t.Fatalf("holdings %+v", hs)
	}
	shm := hs[0].held
	if shm.Role != RoleSHM || !shm.Current || !shm.Mapped || shm.FD != 5 || shm.Nlink != 1 || shm.Match != MatchInode ||
		!shm.FDWrite || !shm.MapWrite || shm.Access != AccessWrite || !slices.Equal(shm.Evidence, []Evidence{EvidenceMap, EvidenceFD}) {
		t.Errorf("shm %+v", shm)
	}
	if m := hs[1].held; m.Role != RoleMain || m.Current || m.FD != 4 || m.Match != MatchName || m.Access != AccessRead {
		t.Errorf("main %+v", m)
	}
	if wal := hs[2].held; wal.Role != RoleWAL || wal.Current || wal.FD != 8 || wal.HostPath != "/d/state.db-wal" {
		t.Errorf("wal %+v", wal)
	}
	if old := hs[3].held; old.Role != RoleMain || old.Current || old.FD != 3 || old.Match != MatchInode || old.HostPath != "/d/state.db.old" {
		t.Errorf("renamed main %+v", old)
	}
	if c := hs[4].held; c.Role != RoleWAL || c.Current || c.FD != 12 || c.Path != "/c/x" || c.HostPath != "/d/state.db-wal" {
		t.Errorf("other namespace %+v", c)
	}
	if !w.candidate([]byte("/d/anything")) || w.candidate([]byte("/dx/state.db")) || w.candidate([]byte("socket:[123]")) {
		t.Error("candidate filter")
	}
}
