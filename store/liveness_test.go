package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

func TestHolderPID(t *testing.T) {
	for holder, want := range map[string]int{
		"pid=123":                       123,
		"gateway host=h pid=77 tid=9":   77,
		"backend:gw1;pid=5":             5,
		"ppid=5":                        0,
		"pid=":                          0,
		"":                              0,
		"pid=99999999999999999999999":   0,
		"worker pid=12 other pid=13 ok": 12,
	} {
		if got := HolderPID(holder); got != want {
			t.Errorf("HolderPID(%q) = %d, want %d", holder, got, want)
		}
	}
}

// The agent's stall check reads a discovered store through its
// directory's handle: once the directory is swapped for a symlink to
// another store's, the read refuses instead of reading the other store.
func TestReadLivenessGoesThroughDirHandle(t *testing.T) {
	tmp := realTemp(t)
	alice := mkdir(t, tmp, "alice")
	bob := mkdir(t, tmp, "bob")
	for _, d := range []string{alice, bob} {
		if err := hermestest.CreateStore(filepath.Join(d, "state.db")); err != nil {
			t.Fatal(err)
		}
	}
	s, err := ResolveStore(filepath.Join(alice, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.ReadLiveness(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(alice, alice+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bob, alice); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadLiveness(ctx); err == nil {
		t.Fatalf("liveness read through %s, a symlink to %s now: no error", alice, bob)
	}
}
