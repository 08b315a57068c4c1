package supervisor

import (
	"testing"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/store"
)

// A process that opened the store's next generation while the scan ran
// holds files the scan saw as not current; once the scan is over they are
// the files at the paths, and it is no orphan (it was killed as one: the
// unlink-races-checkpoint test's next writer). A real orphan's inode is
// still not at its path.
func TestOrphansNow(t *testing.T) {
	main, oldWAL, oldSHM := fileid.ID{Dev: 1, Ino: 10}, fileid.ID{Dev: 1, Ino: 11}, fileid.ID{Dev: 1, Ino: 12}
	newWAL, newSHM := fileid.ID{Dev: 1, Ino: 21}, fileid.ID{Dev: 1, Ino: 22}
	held := func(pid int, wal, shm fileid.ID) holders.Process {
		return holders.Process{Pid: pid, Files: []holders.Held{
			{Role: holders.RoleMain, ID: main, Current: true},
			{Role: holders.RoleWAL, ID: wal}, {Role: holders.RoleSHM, ID: shm},
		}}
	}
	now := store.Generation{
		Main: fileid.State{Exists: true, ID: main},
		WAL:  fileid.State{Exists: true, ID: newWAL},
		SHM:  fileid.State{Exists: true, ID: newSHM},
	}
	got := orphansNow([]holders.Process{held(1, newWAL, newSHM), held(2, oldWAL, oldSHM)}, now)
	if len(got) != 1 || got[0].Pid != 2 {
		t.Fatalf("orphans %+v, want only pid 2 (holding the unlinked sidecars)", got)
	}
	// With the main gone from its path, everyone holding it is an orphan.
	now.Main = fileid.State{}
	if got := orphansNow([]holders.Process{held(1, newWAL, newSHM)}, now); len(got) != 1 {
		t.Fatalf("orphans %+v after the main went", got)
	}
}
