package supervisor

import (
	"testing"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/store"
)

// A process that opened the store's next generation while the scan ran
// holds files the scan saw as not current; once the scan is over they are
// the files at the paths, and it is no orphan (it was killed as one: the
// unlink-races-checkpoint test's next writer). A real orphan's inode is
// still not at its path.
func TestOrphansNow(t *testing.T) {
	main, oldWAL, oldSHM := holders.FileID{Dev: 1, Ino: 10}, holders.FileID{Dev: 1, Ino: 11}, holders.FileID{Dev: 1, Ino: 12}
	newWAL, newSHM := holders.FileID{Dev: 1, Ino: 21}, holders.FileID{Dev: 1, Ino: 22}
	held := func(pid int, wal, shm holders.FileID) holders.Process {
		return holders.Process{Pid: pid, Files: []holders.Held{
			{Role: holders.RoleMain, ID: main, Current: true},
			{Role: holders.RoleWAL, ID: wal}, {Role: holders.RoleSHM, ID: shm},
		}}
	}
	sid := func(id holders.FileID) store.FileID { return store.FileID{Dev: id.Dev, Ino: id.Ino} }
	now := store.Generation{
		Main: store.FileState{Exists: true, ID: sid(main)},
		WAL:  store.FileState{Exists: true, ID: sid(newWAL)},
		SHM:  store.FileState{Exists: true, ID: sid(newSHM)},
	}
	got := orphansNow([]holders.Process{held(1, newWAL, newSHM), held(2, oldWAL, oldSHM)}, now)
	if len(got) != 1 || got[0].Pid != 2 {
		t.Fatalf("orphans %+v, want only pid 2 (holding the unlinked sidecars)", got)
	}
	// With the main gone from its path, everyone holding it is an orphan.
	now.Main = store.FileState{}
	if got := orphansNow([]holders.Process{held(1, newWAL, newSHM)}, now); len(got) != 1 {
		t.Fatalf("orphans %+v after the main went", got)
	}
}
