package holders

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
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

	hermestest.RenameFreshOver(t, db)
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
	pid := holdInSleep(t, f)
	s, _ = c.Targeted(Target{Path: db})
	if len(s.Holders) != 1 {
		t.Fatalf("targeted scan saw %+v, want only the writer", s.Holders)
	}
	s, _ = c.Targeted(Target{Path: db}, pid)
	if len(s.Holders) != 2 || !byRole(holder(t, s, pid))[RoleWAL].Current {
		t.Fatalf("named pid not found as a current wal holder: %+v", s.Holders)
	}
	// and it is remembered for the next targeted scan
	s, _ = c.Targeted(Target{Path: db})
	holder(t, s, pid)
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
// what a caller remembers stays until it forgets it.
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
	hermestest.RenameFreshOver(t, db)
	if _, err := c.Scan([]Target{{Path: db}}); err != nil {
		t.Fatal(err)
	}
	known := c.KnownFiles(Target{Path: db})
	if !slices.ContainsFunc(known, func(k KnownFile) bool { return k.ID == old.Of(RoleMain).ID && k.Role == RoleMain }) {
		t.Fatalf("the held old main %v is forgotten: %+v", old.Of(RoleMain).ID, known)
	}
	w.Kill()
	<-w.Done()
	extra := KnownFile{Store: db, Role: RoleWAL, ID: fileid.ID{Dev: old.Of(RoleMain).ID.Dev, Ino: 1 << 40}}
	c.Remember(extra)
	if _, err := c.Scan([]Target{{Path: db}}); err != nil {
		t.Fatal(err)
	}
	known = c.KnownFiles(Target{Path: db})
	if slices.ContainsFunc(known, func(k KnownFile) bool { return k.ID == old.Of(RoleMain).ID }) {
		t.Errorf("the old main is still known after a full scan found no holder: %+v", known)
	}
	if !slices.Contains(known, extra) {
		t.Errorf("a remembered inode was forgotten by a scan: %+v", known)
	}
	c.ForgetFiles(extra)
	if slices.Contains(c.KnownFiles(Target{Path: db}), extra) {
		t.Error("ForgetFiles did not forget")
	}
}

// An inode number an earlier generation had, now on a file born later,
// is an unrelated file that got the number: its holder is not the
// generation's (where the filesystem records birth times).
func TestKnownInodeWithAnotherBirthIsNotTheGeneration(t *testing.T) {
	db := hermestest.NewStore(t)
	other := filepath.Join(t.TempDir(), "unrelated")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	st, birth, err := lstatFile(other)
	if err != nil {
		t.Fatal(err)
	}
	if birth == 0 {
		t.Skip("this filesystem records no birth times")
	}
	pid := holdFiles(t, holdOptions{}, other)
	for _, c := range []struct {
		birth  int64
		pinned bool
		held   bool
	}{{birth, false, true}, {0, true, true}, {0, false, false}, {birth - 1, false, false}, {birth - 1, true, false}} {
		res, err := ScanWith([]Target{{Path: db}}, Options{Known: []KnownFile{{Store: db, Role: RoleMain, ID: st.ID, Birth: c.birth, Pinned: c.pinned}}})
		if err != nil {
			t.Fatal(err)
		}
		s := &res.Stores[0]
		got := slices.ContainsFunc(s.Holders, func(p Process) bool { return p.Pid == pid })
		if got != c.held {
			t.Errorf("known birth %d (the file's %d), pinned %v: holder %v, want %v", c.birth, birth, c.pinned, got, c.held)
		}
	}
}

// A targeted scan also looks at every process the lock table shows on the
// store: a SQLite connection opened since the last full scan is found
// without being named.
func TestCacheTargetedFindsNewConnectionByLock(t *testing.T) {
	db := hermestest.NewStore(t)
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

// A mapping-only holder of an earlier generation's inode is checked the
// same way (through map_files), and kept when the births agree.
func TestKnownMappedInodeIsVerified(t *testing.T) {
	db := hermestest.NewStore(t)
	st, birth, err := lstatFile(db)
	if err != nil {
		t.Fatal(err)
	}
	pid := startMapHelper(t, db)
	hermestest.RenameFreshOver(t, db)
	for _, b := range []int64{birth, 0} {
		// Without a birth only a pin vouches for the number (the
		// helper's mapping keeps it alive here).
		res, err := ScanWith([]Target{{Path: db}}, Options{Known: []KnownFile{{Store: db, Role: RoleMain, ID: st.ID, Birth: b, Pinned: b == 0}}})
		if err != nil {
			t.Fatal(err)
		}
		m := byRole(holder(t, &res.Stores[0], pid))[RoleMain]
		if !m.Mapped || m.Current || m.Match != MatchInode {
			t.Errorf("birth %d: %+v, want the mapped orphan main by inode", b, m)
		}
	}
}
