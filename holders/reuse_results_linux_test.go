package holders

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// A full scan that finds a store as the last one did (the same read of its
// paths, nobody holding it) takes that scan's result instead of building
// it again; a store whose paths were read anew and found changed, or that
// someone holds, is built. The count of rebuilt results is the work an
// idle reconcile of thousands of stores must not do (issue 16).
func TestScanReusingRebuildsOnlyChangedStores(t *testing.T) {
	const n = 12
	dir := t.TempDir()
	tpl := filepath.Join(dir, "template.db")
	if err := hermestest.CreateStore(tpl); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(tpl)
	if err != nil {
		t.Fatal(err)
	}
	targets := make([]Target, n)
	for i := range targets {
		db := filepath.Join(dir, fmt.Sprintf("p%02d", i), "state.db")
		if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(db, b, 0o600); err != nil {
			t.Fatal(err)
		}
		targets[i] = Target{Path: db}
	}
	all := func(v bool) []bool {
		u := make([]bool, n)
		for i := range u {
			u[i] = v
		}
		return u
	}
	rebuilt := func(res *Result) []string {
		var out []string
		for i := range res.Stores {
			if !res.Reused(i) {
				out = append(out, filepath.Base(filepath.Dir(res.Stores[i].Target.Path)))
			}
		}
		return out
	}
	var c Cache
	res, err := c.ScanReusing(targets, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := rebuilt(res); len(got) != n {
		t.Fatalf("the first scan reused %d results; it has none to reuse", n-len(got))
	}

	// Idle: every path vouched for, then every path read again (an audit,
	// an operator's reconcile) and found the same.
	for _, u := range [][]bool{all(true), all(false)} {
		res, err = c.ScanReusing(targets, u)
		if err != nil {
			t.Fatal(err)
		}
		if got := rebuilt(res); len(got) != 0 {
			t.Fatalf("an idle scan rebuilt %v; want none", got)
		}
	}

	// One store replaced at its path (read again: its event), another
	// held by a live writer: those two are built, the rest reused.
	hermestest.RenameFreshOver(t, targets[3].Path)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: targets[7].Path, Rate: 50})
	u := all(true)
	u[3], u[7] = false, false
	res, err = c.ScanReusing(targets, u)
	if err != nil {
		t.Fatal(err)
	}
	if got := rebuilt(res); !slices.Equal(got, []string{"p03", "p07"}) {
		t.Fatalf("after a rename-over of p03 and a writer on p07 the scan rebuilt %v; want [p03 p07]", got)
	}
	holder(t, res.Store(targets[7].Path), w.Pid)
	if sr := res.Store(targets[3].Path); !sr.Current.Of(RoleMain).Exists || sr.Verdict == VerdictHeld {
		t.Fatalf("p03 after its rename-over: %+v", sr)
	}

	// A targeted scan replaces what the cache keeps for a quiet store (it
	// cannot say clear); the next full scan reuses that store's result
	// and must keep it again, not leave the targeted one.
	full := *res.Store(targets[5].Path)
	if _, err := c.Targeted(targets[5]); err != nil {
		t.Fatal(err)
	}
	if k, _ := c.Known(targets[5]); k.Verdict == full.Verdict {
		t.Fatalf("the targeted scan kept the verdict %s, the full scan's", k.Verdict)
	}

	// Held stays built at every scan (its holder may have gone at any
	// time); the others are reused again.
	res, err = c.ScanReusing(targets, all(true))
	if err != nil {
		t.Fatal(err)
	}
	if got := rebuilt(res); !slices.Equal(got, []string{"p07"}) {
		t.Fatalf("the next scan rebuilt %v; want only the held p07", got)
	}
	if k, _ := c.Known(targets[5]); k.Verdict != full.Verdict || len(k.Blind) != len(full.Blind) {
		t.Fatalf("after a full scan the cache keeps for p05 %s %+v; want the full scan's %s %+v", k.Verdict, k.Blind, full.Verdict, full.Blind)
	}
	w.Kill()
	<-w.Done()
	res, err = c.ScanReusing(targets, all(true))
	if err != nil {
		t.Fatal(err)
	}
	if sr := res.Store(targets[7].Path); len(sr.Holders) != 0 || res.Reused(7) {
		t.Fatalf("p07 after its writer died: reused %v, holders %+v", res.Reused(7), sr.Holders)
	}
}
