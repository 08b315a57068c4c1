package holders

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stateguard/stateguard/fileid"
)

// sameIndex fails unless got indexes every inode as a full build from
// its stores' reads and known files does.
func sameIndex(t *testing.T, got *watch) {
	t.Helper()
	want := buildWatch(got.targets, got.stats)
	want.addKnown(got.known)
	ids := map[fileid.ID]bool{}
	for _, m := range []map[fileid.ID][]idRef{want.ids, got.ids, got.patch} {
		for id := range m {
			ids[id] = true
		}
	}
	for id := range ids {
		if g, w := got.refs(id), want.refs(id); !slices.Equal(g, w) {
			t.Errorf("inode %v indexed as %+v, a full build says %+v", id, g, w)
		}
	}
}

// One store changing among many (a rename-over of its state.db) re-indexes
// that store only, not all of them: the full scan after a change rebuilt
// the index of 10,000 stores, and its garbage set off the GC just as the
// agent had to freeze the writer (issue 16). Counts work, times nothing.
func TestChangedStoreIsReindexedAlone(t *testing.T) {
	const n = 300
	targets := make([]Target, n)
	for i := range targets {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("p%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		targets[i].Path = filepath.Join(dir, "state.db")
		for _, r := range Roles {
			if err := os.WriteFile(targets[i].RolePath(r), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A holder of store 17's main, which the rename-over makes an orphan.
	f, err := os.Open(targets[17].Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pid := holdInSleep(t, f)

	var c Cache
	res, err := c.Scan(targets)
	if err != nil {
		t.Fatal(err)
	}
	if res.w.reindexed != n {
		t.Fatalf("first scan indexed %d stores, want %d", res.w.reindexed, n)
	}
	unchanged := make([]bool, n)
	for i := range unchanged {
		unchanged[i] = true
	}
	// The first scan remembered store 17's held files: the next indexes
	// them, for that store only; the one after has nothing new.
	for want := 1; want >= 0; want-- {
		res, err = c.ScanReusing(targets, unchanged)
		if err != nil {
			t.Fatal(err)
		}
		if res.w.reindexed != want {
			t.Errorf("idle scan re-indexed %d stores, want %d", res.w.reindexed, want)
		}
		sameIndex(t, res.w)
	}

	renameOver := func(i int) {
		t.Helper()
		tmp := targets[i].Path + ".new"
		if err := os.WriteFile(tmp, []byte("y"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, targets[i].Path); err != nil {
			t.Fatal(err)
		}
	}
	for step, i := range []int{17, 17, 3, 299} {
		renameOver(i)
		unchanged[i] = false
		res, err = c.ScanReusing(targets, unchanged)
		unchanged[i] = true
		if err != nil {
			t.Fatal(err)
		}
		if res.w.reindexed != 1 {
			t.Errorf("step %d: one store changed among %d, %d re-indexed", step, n, res.w.reindexed)
		}
		sameIndex(t, res.w)
		s := res.Store(targets[17].Path)
		if !slices.ContainsFunc(s.Holders, func(p Process) bool { return p.Pid == pid && p.Orphan() }) {
			t.Errorf("step %d: the holder of the renamed-over main is no orphan: %+v", step, s.Holders)
		}
	}
}
