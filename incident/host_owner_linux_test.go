package incident

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// ownedDir is a directory of a new user's, as discovery records it.
func ownedDir(t *testing.T, name string) (string, store.DirID) {
	t.Helper()
	uid, gid := hermestest.AddUser(t, name)
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} { // as /home: anyone may pass
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(base, "profile")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	st, err := fileid.Lstat(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, store.DirID{ID: st.ID, UID: uid, GID: gid}
}

// ownedFile is a file of the directory's owner with mode perm.
func ownedFile(t *testing.T, dir string, d store.DirID, name string, perm os.FileMode) (string, fileid.ID) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("data of "+name), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, d.UID, d.GID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
	st, err := fileid.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, st.ID
}

// Issue 33: a pin is opened as the store's owner. A root process holds
// two of carol's files, one she may read and one (mode 0000) she may
// not: the first is pinned, the second is not, with an error that says
// why; an agent with no recorded directory (its own stores) pins both.
func TestHostPinsAsTheStoreOwner(t *testing.T) {
	dir, d := ownedDir(t, "sgsec4-p1-carol")
	readable, rid := ownedFile(t, dir, d, "state.db-wal", 0o600)
	closed, cid := ownedFile(t, dir, d, "other-wal", 0o000)
	h := hermestest.SpawnWatched(t, nil, "/bin/sh", "-c", `exec 3<"$0" 4<"$1" && echo ready && exec sleep 600`, readable, closed)

	f, err := Host{Dir: d}.Pin(h.Pid, holders.Held{FD: 3, ID: rid})
	if err != nil {
		t.Fatalf("pin of a file carol may read: %v", err)
	}
	f.Close()
	if f, err := (Host{Dir: d}).Pin(h.Pid, holders.Held{FD: 4, ID: cid}); err == nil {
		f.Close()
		t.Errorf("root pinned %s (mode 0000), which carol cannot read", closed)
	} else if !strings.Contains(err.Error(), "as the store's owner") {
		t.Errorf("the refused pin does not say why: %v", err)
	}
	f, err = Host{}.Pin(h.Pid, holders.Held{FD: 4, ID: cid})
	if err != nil {
		t.Fatalf("pin without a recorded owner: %v", err)
	}
	f.Close()
}

// The snapshot's read transaction on the live store is opened as its
// owner too: on a main carol cannot read (mode 0000) it is refused, and
// the snapshot goes on without it, saying so.
func TestSnapshotReadTransactionAsTheStoreOwner(t *testing.T) {
	dir, d := ownedDir(t, "sgsec4-p2-carol")
	db := filepath.Join(dir, "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		os.Chown(p, d.UID, d.GID)
	}
	main, err := os.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer main.Close()
	if err := os.Chmod(db, 0o000); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	r := Recovery{Log: slog.New(slog.NewTextHandler(&log, nil)), Dir: d}
	if err := r.Snapshot(context.Background(), db, main, filepath.Join(dir, "state.db.snapshot")); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if !strings.Contains(log.String(), "no read transaction on the new generation") {
		t.Errorf("root opened a read transaction on %s (mode 0000), which carol cannot read; log: %s", db, log.String())
	}
}
