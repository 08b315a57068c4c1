package incident

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// The profile directory swapped for a look-alike (renamed aside, another
// directory with a session file, a snapshot and a staging capture of the
// same names put at its path): the incident's looks at it (which session
// files Hermes diverted into, whether a snapshot or staging capture is
// there, when the main was replaced) see none of the look-alike's files.
// By name (before), all of them read the look-alike as the profile.
func TestIncidentLooksRefuseALookAlikeProfileDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "work")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "state.db")
	if err := os.WriteFile(db, []byte("main"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := store.ResolveStore(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, dir+".aside"); err != nil {
		t.Fatal(err)
	}
	snap, staging := snapshotPath(db, "inc-1"), db+".retired-wal-x.partial"
	for _, d := range []string{dir, filepath.Join(dir, "sessions"), staging} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{db, snap, filepath.Join(dir, "sessions", "s1.jsonl")} {
		if err := os.WriteFile(f, []byte("{}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	seen := time.Now().Add(time.Hour) // seen late: a read of the look-alike would take its main's earlier ctime
	if got := (&Engine{st: st}).sessionFiles(); len(got) != 0 {
		t.Errorf("session files listed in the look-alike: %v", got)
	}
	for _, p := range []string{snap, staging} {
		if existsInStoreDir(st, p) {
			t.Errorf("%s found in the look-alike", p)
		}
	}
	if got := replacedAt(st, journal.KindReplaced, seen); !got.Equal(seen) {
		t.Errorf("replacedAt read the look-alike's main: %v, want %v", got, seen)
	}
}
