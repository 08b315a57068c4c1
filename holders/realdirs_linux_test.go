package holders

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/fileid"
)

// The name rule (an inode never seen, held under a role's name in the
// store's directory, is an orphan of that role) looks in the store's
// directory as discovery recorded it, never through a symlink put there
// since: with alice's directory swapped for a link to bob's, a process of
// bob's holding his own unlinked state.db-wal is no holder of alice's
// store (it would be an orphan writer, to be frozen).
func TestNameRuleFollowsNoSymlinkedStoreDir(t *testing.T) {
	alice, bob := twoStoreDirs(t)
	bobWAL := filepath.Join(bob, "state.db-wal")
	if err := os.WriteFile(bobWAL, []byte("bob's"), 0o600); err != nil {
		t.Fatal(err)
	}
	pid := holdFiles(t, holdOptions{write: true}, bobWAL)
	if err := os.Remove(bobWAL); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(alice, "state.db")
	if s := scanOne(t, db); len(s.Holders) != 0 {
		t.Fatalf("holders of %s before the swap: %+v", db, s.Holders)
	}
	swapForLink(t, alice, bob)
	for _, h := range scanOne(t, db).Holders {
		if h.Pid == pid {
			t.Errorf("pid %d, holding %s (deleted), is a holder of %s through the symlink: %+v", pid, bobWAL, db, h)
		}
	}
}

// The inode rule's current files are read through the store's directory
// opened without following a symlink: with alice's directory swapped for
// a link to bob's, bob's state.db and -wal (held open for writing by a
// process of bob's) are not alice's store's current files, bob's process
// is no holder of alice's store, and the scan says it cannot tell
// (unknown), never "held" or "clear" on bob's files.
func TestCurrentFilesFollowNoSymlinkedStoreDir(t *testing.T) {
	alice, bob := twoStoreDirs(t)
	bobDB, bobWAL := filepath.Join(bob, "state.db"), filepath.Join(bob, "state.db-wal")
	for _, f := range []string{bobDB, bobWAL} {
		if err := os.WriteFile(f, []byte("bob's"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pid := holdFiles(t, holdOptions{write: true}, bobDB, bobWAL)
	db := filepath.Join(alice, "state.db")
	if s := scanOne(t, db); len(s.Holders) != 0 || s.Current.Of(RoleWAL).Exists {
		t.Fatalf("%s before the swap: holders %+v, current %+v", db, s.Holders, s.Current)
	}
	swapForLink(t, alice, bob)
	s := scanOne(t, db)
	for _, r := range Roles {
		if st := s.Current.Of(r); st.Exists {
			t.Errorf("%s's %s through the symlink is %v (bob's file): current %+v", db, r, st.ID, s.Current)
		}
	}
	for _, h := range s.Holders {
		if h.Pid == pid {
			t.Errorf("pid %d, holding bob's %s, is a holder of %s through the symlink: %+v", pid, bobWAL, db, h)
		}
	}
	if s.Verdict != VerdictUnknown || len(s.Blind) == 0 {
		t.Errorf("verdict %q, blind %+v through the symlink; want unknown, with the refused read named", s.Verdict, s.Blind)
	}
}

// A recorded directory (Target.Dir) that is no longer at the path (the
// profile directory renamed away and another put in its place) is refused
// the same way: its files are not the store's.
func TestCurrentFilesOnlyInTheRecordedDir(t *testing.T) {
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	alice := filepath.Join(tmp, "alice")
	if err := os.Mkdir(alice, 0o700); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(alice)
	if err != nil {
		t.Fatal(err)
	}
	rec := DirRecord{ID: fileid.Of(fi).ID, UID: os.Getuid()}
	db := filepath.Join(alice, "state.db")
	if err := os.WriteFile(db, []byte("alice's"), 0o600); err != nil {
		t.Fatal(err)
	}
	scan := func() *StoreResult {
		t.Helper()
		res, err := Scan([]Target{{Path: db, Dir: rec}})
		if err != nil {
			t.Fatal(err)
		}
		return &res.Stores[0]
	}
	if s := scan(); !s.Current.Of(RoleMain).Exists || len(s.Blind) != 0 {
		t.Fatalf("%s in the recorded directory: current %+v, blind %+v", db, s.Current, s.Blind)
	}
	if err := os.Rename(alice, alice+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(alice, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, []byte("another"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := scan()
	if st := s.Current.Of(RoleMain); st.Exists {
		t.Errorf("%s in a directory that is not the recorded one is current: %+v", db, st)
	}
	if s.Verdict != VerdictUnknown || len(s.Blind) == 0 {
		t.Errorf("verdict %q, blind %+v in another directory; want unknown", s.Verdict, s.Blind)
	}
}

// twoStoreDirs makes alice's and bob's store directories in a temporary
// directory reached without symlinks.
func twoStoreDirs(t *testing.T) (alice, bob string) {
	t.Helper()
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	alice, bob = filepath.Join(tmp, "alice"), filepath.Join(tmp, "bob")
	for _, d := range []string{alice, bob} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return alice, bob
}

// swapForLink moves dir aside and puts a symlink to target in its place,
// as the owner of dir can while root agentd works in it.
func swapForLink(t *testing.T, dir, target string) {
	t.Helper()
	if err := os.Rename(dir, dir+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, dir); err != nil {
		t.Fatal(err)
	}
}
