package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/store"
)

// Issue 33: the stall check's connection on a user's store is opened as
// the store's owner. On a main carol cannot read (mode 0000, hers) root's
// connection is refused by the kernel, and the check says so.
func TestStallReadsAsTheStoreOwner(t *testing.T) {
	base := attackBase(t)
	carol := newAttackUser(t, base, "sgsec4-s1-carol")
	db := carol.store()
	if err := os.Chmod(db, 0o000); err != nil {
		t.Fatal(err)
	}
	st, err := fileid.Lstat(filepath.Dir(db))
	if err != nil {
		t.Fatal(err)
	}
	s := store.Store{Path: db, Profile: "work", Home: carol.hermes, Kind: store.Hermes,
		DirID: store.DirID{ID: st.ID, UID: carol.uid, GID: carol.gid}}
	w := NewStallWatch(StallConfig{Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = w.read(ctx, s, time.Now())
	if err == nil || !strings.Contains(err.Error(), "unable to open") {
		t.Errorf("stall check of %s (mode 0000, carol's): %v, want it refused as carol", db, err)
	}
}
