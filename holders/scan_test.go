package holders

import (
	"path/filepath"
	"testing"
)

// Portable: on every OS a scan answers for every target, and a store that
// does not exist is never held.
func TestScanAnswersForEveryTarget(t *testing.T) {
	dir := t.TempDir()
	targets := []Target{{Path: filepath.Join(dir, "a", "state.db")}, {Path: filepath.Join(dir, "state.db")}}
	res, err := Scan(targets)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stores) != 2 || res.Took <= 0 {
		t.Fatalf("result %+v", res)
	}
	for i, s := range res.Stores {
		if s.Target != targets[i] || res.Store(targets[i].Path) != &res.Stores[i] {
			t.Errorf("store %d is %v", i, s.Target)
		}
		if len(s.Holders) != 0 || s.Verdict == VerdictHeld {
			t.Errorf("%s: holders %+v verdict %s", s.Target.Path, s.Holders, s.Verdict)
		}
		for _, r := range Roles {
			if st := s.Current.Of(r); s.Current == nil || st.Exists {
				t.Errorf("%s %s: %+v", s.Target.Path, r, st)
			}
		}
		if (s.Verdict == VerdictUnknown) != (len(s.Blind) > 0) {
			t.Errorf("verdict %s with blind %+v", s.Verdict, s.Blind)
		}
	}
}
