package holders

import (
	"strings"
	"testing"

	"github.com/stateguard/stateguard/fileid"
)

// The foreign rules, one case each: another owner, a sidecar linked
// twice (a main may be: a backup's hard link), a directory not recorded
// (nothing can be told), an owner not known (a lock-only holder).
func TestForeignWhy(t *testing.T) {
	carol := Target{Path: "/h/carol/state.db", Dir: DirRecord{ID: fileid.ID{Dev: 1, Ino: 2}, UID: 1001}}
	for _, c := range []struct {
		name  string
		t     Target
		role  Role
		owner int
		nlink uint64
		want  string
	}{
		{"hers", carol, RoleWAL, 1001, 1, ""},
		{"dave's main", carol, RoleMain, 1002, 1, "owned by uid 1002"},
		{"root's -wal", carol, RoleWAL, 0, 1, "owned by uid 0"},
		{"her -wal linked twice", carol, RoleWAL, 1001, 2, "has 2 links"},
		{"her -shm linked twice", carol, RoleSHM, 1001, 3, "has 3 links"},
		{"her main linked twice", carol, RoleMain, 1001, 2, ""},
		{"owner unknown", carol, RoleWAL, -1, 1, ""},
		{"no recorded directory", Target{Path: carol.Path}, RoleMain, 1002, 1, ""},
	} {
		got := ForeignWhy(c.t, c.role, c.owner, c.nlink)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// A holder of another uid is foreign unless it holds one of SQLite's
// locks on the store's files.
func TestForeignProcess(t *testing.T) {
	carol := Target{Path: "/h/carol/state.db", Dir: DirRecord{ID: fileid.ID{Dev: 1, Ino: 2}, UID: 1001}}
	fdOnly := []Held{{Role: RoleWAL, Evidence: []Evidence{EvidenceFD}}}
	locked := []Held{{Role: RoleWAL, Evidence: []Evidence{EvidenceFD}}, {Role: RoleSHM, Evidence: []Evidence{EvidenceFD, EvidenceLock}}}
	for _, c := range []struct {
		name    string
		p       Process
		foreign bool
	}{
		{"carol's", Process{UID: 1001, Files: fdOnly}, false},
		{"root's fd only", Process{UID: 0, Files: fdOnly}, true},
		{"dave's SQLite connection", Process{UID: 1002, Files: locked}, false},
		{"uid unknown", Process{UID: -1, Files: fdOnly}, false},
	} {
		if got := foreignProcess(carol, &c.p); (got != "") != c.foreign {
			t.Errorf("%s: %q, want foreign %v", c.name, got, c.foreign)
		}
	}
}
