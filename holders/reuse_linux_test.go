package holders

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// reuseInode frees path's inode and creates files next to it until one
// gets the freed number (ext4 hands it out again at once), which it
// returns open: an unrelated file with the orphan's (dev, ino).
func reuseInode(t *testing.T, path string, id fileid.ID) *os.File {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; time.Now().Before(deadline) && i < 50000; i++ {
		f, err := os.Create(filepath.Join(filepath.Dir(path), fmt.Sprintf("new-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := f.Stat(); err == nil && fileid.Of(fi).ID == id {
			t.Cleanup(func() { f.Close() })
			return f
		}
		f.Close()
	}
	t.Skipf("the filesystem gave no new file the number %v", id)
	return nil
}

func notHolder(t *testing.T, s *StoreResult, pid int, what string) {
	t.Helper()
	if slices.ContainsFunc(s.Holders, func(p Process) bool { return p.Pid == pid }) {
		t.Errorf("%s: unrelated pid %d holding a file that reused an orphan's inode number is taken for a holder: %+v", what, pid, s.Holders)
	}
}

// An orphan's inode, remembered and then freed (its pin closed, its
// holder gone, the file deleted), must never make the process holding an
// unrelated file that got the number a holder of the store: that holder
// would be frozen and killed. Both ways an inode is remembered without a
// live pin are covered: from the journal on resume (no birth time), and
// held by a holder at the last scan when the pin is forgotten.
func TestReusedInodeNumberIsNotTheOrphan(t *testing.T) {
	for _, tc := range []string{"journaled", "unpinned-after-scan"} {
		t.Run(tc, func(t *testing.T) {
			db := hermestest.NewStore(t)
			orphan := filepath.Join(t.TempDir(), "state.db")
			if err := os.WriteFile(orphan, []byte("orphan"), 0o644); err != nil {
				t.Fatal(err)
			}
			st, _, err := lstatFile(orphan)
			if err != nil {
				t.Fatal(err)
			}
			var c Cache
			if _, err := c.Scan([]Target{{Path: db}}); err != nil {
				t.Fatal(err)
			}
			k := KnownFile{Store: db, Role: RoleMain, ID: st.ID}
			if tc == "journaled" {
				c.Remember(k) // as the resume does from a journal record
			} else {
				pinFD, err := os.Open(orphan)
				if err != nil {
					t.Fatal(err)
				}
				holderFD, _ := os.Open(orphan)
				old := holdInSleep(t, holderFD)
				holderFD.Close()
				k.Pinned = true
				c.Remember(k)
				res, err := c.Scan([]Target{{Path: db}})
				if err != nil {
					t.Fatal(err)
				}
				holder(t, &res.Stores[0], old) // the orphan's real holder is found through the pin
				c.ForgetFiles(k)
				pinFD.Close()
				p, _ := os.FindProcess(old)
				p.Kill()
				waitGone(t, old)
			}
			f := reuseInode(t, orphan, st.ID)
			pid := holdInSleep(t, f)
			s, err := c.Targeted(Target{Path: db}, pid)
			if err != nil {
				t.Fatal(err)
			}
			notHolder(t, s, pid, "targeted scan naming it")
			res, err := c.Scan([]Target{{Path: db}})
			if err != nil {
				t.Fatal(err)
			}
			notHolder(t, &res.Stores[0], pid, "full scan")
		})
	}
}

// waitGone polls until pid is reaped or a zombie.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || slices.Contains([]string{"Z", "X"}, procState(b)) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("pid %d did not exit", pid)
}

func procState(stat []byte) string {
	i := slices.Index(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return ""
	}
	return string(stat[i+2])
}
