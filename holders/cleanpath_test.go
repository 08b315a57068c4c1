package holders

import (
	"path/filepath"
	"testing"
)

// TestCleanPathIsFilepathClean: the one-pass check agrees with
// filepath.Clean on which paths it leaves alone, and cleanPath returns
// what filepath.Clean does.
func TestCleanPathIsFilepathClean(t *testing.T) {
	for _, p := range []string{
		"/", "//", "/a", "/a/", "/a//b", "/a/./b", "/a/../b", "/a/.", "/a/..", "/.", "/..",
		"/root/.hermes/state.db", "/root/..hermes/x", "/a/b.", "/a/.b/c", "/a/...", "a/b", "", ".",
		"/tmp/home/profiles/p000123/state.db",
	} {
		want := filepath.IsAbs(p) && len(p) > 1 && filepath.Clean(p) == p
		if got := isClean(p); got != want {
			t.Errorf("isClean(%q) = %v, want %v", p, got, want)
		}
		if got := cleanPath(p); got != filepath.Clean(p) {
			t.Errorf("cleanPath(%q) = %q, want %q", p, got, filepath.Clean(p))
		}
	}
}

func FuzzCleanPath(f *testing.F) {
	f.Add("/a/./b")
	f.Add("/root/.hermes/profiles/x/state.db")
	f.Fuzz(func(t *testing.T, p string) {
		if got, want := cleanPath(p), filepath.Clean(p); got != want {
			t.Fatalf("cleanPath(%q) = %q, want %q", p, got, want)
		}
	})
}
