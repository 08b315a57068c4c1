package holders

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

func TestCacheTargetedFollowsKnownHolders(t *testing.T) {
	db, w := startStore(t)
	var c Cache
	if _, err := c.Targeted(Target{Path: db}); err != nil {
		t.Fatal(err) // cold cache: inspects nothing, must not fail
	}
	if _, err := c.Scan([]Target{{Path: db}}); err != nil {
		t.Fatal(err)
	}
	s, err := c.Targeted(Target{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	if s.Verdict != VerdictHeld {
		t.Fatalf("targeted verdict %s", s.Verdict)
	}
	before := s.Current
	wantHeld(t, holder(t, s, w.Pid), map[Role]bool{RoleMain: true, RoleWAL: true, RoleSHM: true}, before)

	renameOver(t, db)
	s, err = c.Targeted(Target{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	wantHeld(t, holder(t, s, w.Pid), map[Role]bool{RoleMain: false, RoleWAL: true, RoleSHM: true}, before)

	// A process that opened the store after the full scan is invisible to
	// a targeted scan unless the caller names it.
	f, err := os.Open(db + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("sleep", "60")
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot run sleep: %v", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	s, _ = c.Targeted(Target{Path: db})
	if len(s.Holders) != 1 {
		t.Fatalf("targeted scan saw %+v, want only the writer", s.Holders)
	}
	s, _ = c.Targeted(Target{Path: db}, cmd.Process.Pid)
	if len(s.Holders) != 2 || !byRole(holder(t, s, cmd.Process.Pid))[RoleWAL].Current {
		t.Fatalf("named pid not found as a current wal holder: %+v", s.Holders)
	}
	// and it is remembered for the next targeted scan
	s, _ = c.Targeted(Target{Path: db})
	holder(t, s, cmd.Process.Pid)
}

func TestCacheTargetedNeverSaysClear(t *testing.T) {
	db, w := startStore(t)
	var c Cache
	if _, err := c.Scan([]Target{{Path: db}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	s, err := c.Targeted(Target{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Holders) != 0 || s.Verdict != VerdictUnknown {
		t.Fatalf("after the only holder exited: verdict %s holders %+v", s.Verdict, s.Holders)
	}
}

func TestCacheConcurrentUse(t *testing.T) {
	db, w := startStore(t)
	var c Cache
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 5 {
				if i%2 == 0 {
					if _, err := c.Scan([]Target{{Path: db}}); err != nil {
						t.Error(err)
					}
				} else if s, err := c.Targeted(Target{Path: db}); err != nil {
					t.Error(err)
				} else if len(s.Holders) > 1 {
					t.Errorf("holders %+v", s.Holders)
				}
				c.Last()
				c.Known(Target{Path: db})
			}
		})
	}
	wg.Wait()
	s, ok := c.Known(Target{Path: db})
	if !ok || len(s.Holders) != 1 || s.Holders[0].Pid != w.Pid {
		t.Fatalf("known: %v %+v", ok, s.Holders)
	}
}

// The cache remembers the inodes of every generation it saw while
// someone holds them, and forgets them once a full scan finds nobody;
// what a caller remembers for it counts the same way.
func TestCacheRemembersGenerations(t *testing.T) {
	db, w := startStore(t)
	var c Cache
	res, err := c.Scan([]Target{{Path: db}})
	if err != nil {
		t.Fatal(err)
	}
	old := res.Stores[0].Current
	if n := len(c.KnownFiles(Target{Path: db})); n != 3 {
		t.Fatalf("%d inodes known after one scan, want the 3 at the path", n)
	}
	renameOver(t, db)
	if _, err := c.Scan([]Target{{Path: db}}); err != nil {
		t.Fatal(err)
	}
	known := c.KnownFiles(Target{Path: db})
	if !slices.ContainsFunc(known, func(k KnownFile) bool { return k.ID == old[RoleMain].ID && k.Role == RoleMain }) {
		t.Fatalf("the held old main %v is forgotten: %+v", old[RoleMain].ID, known)
	}
	w.Kill()
	<-w.Done()
	extra := KnownFile{Store: db, Role: RoleWAL, ID: FileID{Dev: old[RoleMain].ID.Dev, Ino: 1 << 40}}
	c.Remember(extra)
	if !slices.Contains(c.KnownFiles(Target{Path: db}), extra) {
		t.Fatal("Remember did not add the inode")
	}
	if _, err := c.Scan([]Target{{Path: db}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range c.KnownFiles(Target{Path: db}) {
		if k.ID == old[RoleMain].ID || k == extra {
			t.Errorf("%+v still known after a full scan found no holder", k)
		}
	}
}

// A targeted scan also looks at every process the lock table shows on the
// store: a SQLite connection opened since the last full scan is found
// without being named.
func TestCacheTargetedFindsNewConnectionByLock(t *testing.T) {
	db := filepath.Join(t.TempDir(), "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	var c Cache
	if _, err := c.Scan([]Target{{Path: db}}); err != nil {
		t.Fatal(err)
	}
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 50})
	s, err := c.Targeted(Target{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	holder(t, s, w.Pid)
}
