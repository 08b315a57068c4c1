//go:build linux

package recovery

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/store"
)

// The start-up cleanup of stale partial captures runs as root inside the
// store directory discovery recorded, through its handle: once that
// directory is renamed away and its name made a symlink to it, or a
// look-alike directory (holding a stale partial capture of its own) is
// put there, CleanPartials refuses and removes nothing in either place.
func TestCleanPartialsOnlyInRecordedDir(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stalePartial := func(t *testing.T, db string) string {
		p, err := StageCapture(CaptureRequest{DBPath: db, PID: 77, Now: time.Date(2026, 10, 1, 7, 0, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(partialMark{AgentPID: dead.Process.Pid, Database: db})
		if err := os.WriteFile(filepath.Join(p, partialMarker), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, swap := range []string{"symlink", "look-alike"} {
		t.Run(swap, func(t *testing.T) {
			db, _ := sidecarStore(t)
			dir := filepath.Dir(db)
			mine := stalePartial(t, db)
			st, err := store.ResolveStore(db)
			if err != nil {
				t.Fatal(err)
			}
			aside := dir + "-aside"
			if err := os.Rename(dir, aside); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(aside) })
			var theirs string
			if swap == "symlink" {
				err = os.Symlink(aside, dir)
			} else if err = os.Mkdir(dir, 0o700); err == nil {
				theirs = stalePartial(t, db)
			}
			if err != nil {
				t.Fatal(err)
			}
			removed, err := CleanPartials(db, st.DirID, nil)
			if !errors.Is(err, store.ErrDirChanged) && !errors.Is(err, store.ErrSymlinkInPath) {
				t.Fatalf("%s: removed %v, %v; want a directory-changed or symlink refusal", swap, removed, err)
			}
			for _, p := range []string{filepath.Join(aside, filepath.Base(mine)), theirs} {
				if _, err := os.Lstat(p); p != "" && err != nil {
					t.Errorf("%s: %s was removed: %v", swap, p, err)
				}
			}
		})
	}
}
