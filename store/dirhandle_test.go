package store

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stateguard/stateguard/fileid"
)

func TestOpenDirRefusesSymlinkAnywhere(t *testing.T) {
	tmp := realTemp(t)
	real := mkdir(t, tmp, "real", "profiles", "p")
	if err := os.Symlink(filepath.Join(tmp, "real", "profiles"), filepath.Join(tmp, "profiles")); err != nil {
		t.Fatal(err)
	}
	h, err := OpenDir(real, DirID{})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	for _, p := range []string{filepath.Join(tmp, "profiles", "p"), filepath.Join(tmp, "profiles")} {
		if h, err := OpenDir(p, DirID{}); !errors.Is(err, ErrSymlinkInPath) {
			h.Close()
			t.Errorf("OpenDir(%s) = %v, want ErrSymlinkInPath", p, err)
		}
	}
}

func TestOpenDirAndVerifyCatchSwaps(t *testing.T) {
	tmp := realTemp(t)
	dir := mkdir(t, tmp, "p")
	id, err := lstatDirID(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, err := OpenDir(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Verify(); err != nil {
		t.Fatalf("unchanged directory: %v", err)
	}
	// Renamed away and replaced by another directory of the same name.
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	mkdir(t, tmp, "p")
	err = h.Verify()
	var dc *DirChangedError
	if !errors.As(err, &dc) || dc.Path != dir || !errors.Is(err, fileid.ErrIdentityChanged) {
		t.Fatalf("Verify after a swap = %v, want a DirChangedError naming %s", err, dir)
	}
	// The handle still reaches the original directory.
	if _, err := os.Stat(filepath.Join(dir + ".old")); err != nil {
		t.Fatal(err)
	}
	if h2, err := OpenDir(dir, id); !errors.As(err, &dc) {
		h2.Close()
		t.Fatalf("OpenDir of the new directory with the old DirID = %v, want DirChangedError", err)
	}
	// The same directory given away to another owner is refused too.
	if os.Geteuid() == 0 {
		if err := os.Rename(dir+".old", filepath.Join(tmp, "q")); err != nil {
			t.Fatal(err)
		}
		q := filepath.Join(tmp, "q")
		if err := os.Chown(q, 4244, 4244); err != nil {
			t.Fatal(err)
		}
		if h2, err := OpenDir(q, id); !errors.As(err, &dc) {
			h2.Close()
			t.Fatalf("OpenDir of a chowned directory = %v, want DirChangedError", err)
		}
	}
}

func TestProfilesSymlinkRule(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give directories to other uids")
	}
	tmp := realTemp(t)
	const alice, bob = 4245, 4246
	aliceRoot := mkdir(t, tmp, "alice", ".hermes")
	bobProfiles := mkdir(t, tmp, "bob", ".hermes", "profiles")
	createStore(t, filepath.Join(bobProfiles, "work", "state.db"))
	own := mkdir(t, tmp, "alice", "data", "profiles")
	createStore(t, filepath.Join(own, "mine", "state.db"))
	for _, d := range []string{aliceRoot, filepath.Join(tmp, "alice", "data"), own, filepath.Join(own, "mine")} {
		chown(t, d, alice)
	}
	chown(t, bobProfiles, bob)
	link := filepath.Join(aliceRoot, "profiles")
	symlinkAs(t, bobProfiles, link, alice)

	h := Home{Root: aliceRoot, Source: SourcePasswd, UID: alice}
	stores, ps := Profiles(h)
	for _, s := range stores {
		if s.Profile != DefaultProfile {
			t.Errorf("bob's profile discovered through alice's link: %+v", s)
		}
	}
	if len(ps) != 1 || ps[0].Path != link || !errors.Is(ps[0], ErrUntrustedLink) {
		t.Fatalf("problems %v, want one ErrUntrustedLink at %s", ps, link)
	}

	// A link to her own directory is fine, and the store's path is the
	// resolved one, so later no-symlink opens reach it.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	symlinkAs(t, own, link, alice)
	stores, ps = Profiles(h)
	noProblems(t, ps)
	if len(stores) != 2 || stores[1].Path != filepath.Join(own, "mine", "state.db") || stores[1].DirID.UID != alice {
		t.Fatalf("stores %+v", stores)
	}
	hd, err := stores[1].OpenDir()
	if err != nil {
		t.Fatal(err)
	}
	hd.Close()
}

func TestSymlinkedHomeRule(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give directories to other uids")
	}
	tmp := realTemp(t)
	const alice = 4247
	home := mkdir(t, tmp, "home", "alice")
	chown(t, home, alice)
	service := mkdir(t, tmp, "srv", "svc") // root's
	createStore(t, filepath.Join(service, "state.db"))
	symlinkAs(t, service, filepath.Join(home, ".hermes"), alice)
	passwd := filepath.Join(tmp, "passwd")
	writeFile(t, passwd, "alice:x:4247:4247::"+home+":/bin/sh\n")
	homes, ps := DiscoverHomes(DiscoverOptions{Getenv: env(), UserHome: mkdir(t, tmp, "nobody"), AllUsers: true, PasswdPath: passwd})
	if len(homes) != 0 || len(ps) != 1 || !errors.Is(ps[0], ErrUntrustedLink) {
		t.Fatalf("homes %+v problems %v: a user's link to root's directory must not become a home", homes, ps)
	}
	for _, p := range []string{"/", "/etc", "/var/lib/x", "/usr/share"} {
		if !isSystemDir(p) {
			t.Errorf("%s is a system directory", p)
		}
	}
	for _, p := range []string{"/home/alice", "/var/home/alice", "/srv2", "/root/x"} {
		if isSystemDir(p) {
			t.Errorf("%s is not a system directory", p)
		}
	}
}

func TestAsOwnerWritesWithTheOwnersRights(t *testing.T) {
	if os.Geteuid() != 0 || runtime.GOOS != "linux" {
		t.Skip("needs root on Linux")
	}
	tmp := realTemp(t)
	const alice = 4248
	// The owner must be able to reach her directory, as in /home.
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mine := mkdir(t, tmp, "alice")
	chown(t, mine, alice)
	if err := os.Chmod(mine, 0o700); err != nil {
		t.Fatal(err)
	}
	roots := mkdir(t, tmp, "root")
	if err := os.Chmod(roots, 0o755); err != nil {
		t.Fatal(err)
	}
	err := AsOwner(alice, alice, func() error {
		return os.WriteFile(filepath.Join(mine, "f"), []byte("x"), 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := fileid.Lstat(filepath.Join(mine, "f"))
	if err != nil || st.UID != alice || st.GID != alice {
		t.Fatalf("file made as owner: %+v %v, want uid/gid %d", st, err, alice)
	}
	err = AsOwner(alice, alice, func() error {
		return os.WriteFile(filepath.Join(roots, "f"), []byte("x"), 0o600)
	})
	if !errors.Is(err, os.ErrPermission) {
		t.Fatalf("writing into root's 0755 directory as the owner: %v, want permission denied", err)
	}
	// The process itself is still root afterwards.
	if err := os.WriteFile(filepath.Join(roots, "g"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, p string, uid int) {
	t.Helper()
	if err := os.Chown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}

func symlinkAs(t *testing.T, target, link string, uid int) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, uid, uid); err != nil {
		t.Fatal(err)
	}
}

func fileOwner(fi os.FileInfo) int { return fileid.Of(fi).UID }
