package holders

import (
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
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
