//go:build unix

package recovery

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/store"
)

// An interrupted divert's staging directory is removed through the fd of
// sessions/recovered opened for the divert, never by its path: once that
// path is a symlink to another user's directory holding a staging
// directory of the same name, removeAll empties the one in the opened
// directory and leaves the other untouched.
func TestDivertStagingRemovedThroughHandle(t *testing.T) {
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	recovered := filepath.Join(tmp, "alice", "recovered")
	victim := filepath.Join(tmp, "bob", "recovered")
	const staging = ".inc-1" + divertStagingSuffix
	for _, d := range []string{recovered, victim} {
		if err := os.MkdirAll(filepath.Join(d, staging, DivertPreReplacementDir), 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"s1.jsonl", filepath.Join(DivertPreReplacementDir, "s1.jsonl")} {
			if err := os.WriteFile(filepath.Join(d, staging, f), []byte("{}\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	d, err := openStoreDir(recovered, store.DirID{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	// The profile-side directory above recovered, not recovered itself,
	// becomes the link: a path's last component is not followed anyway.
	home := filepath.Dir(recovered)
	if err := os.Rename(home, home+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(victim), home); err != nil {
		t.Fatal(err)
	}
	aside := filepath.Join(home+".aside", "recovered")
	if err := d.removeAll(staging); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"s1.jsonl", filepath.Join(DivertPreReplacementDir, "s1.jsonl")} {
		if _, err := os.Stat(filepath.Join(victim, staging, f)); err != nil {
			t.Errorf("the other directory's %s: %v (removed through the swapped path)", f, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(aside, staging)); !os.IsNotExist(err) {
		t.Errorf("the opened directory's staging directory is still there: %v", err)
	}
}
