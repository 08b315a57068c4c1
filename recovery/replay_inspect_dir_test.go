package recovery

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/store"
)

// --inspect-only reads the store the operator named, resolved once: if
// the store's directory is swapped between that resolution and the read
// (for a symlink to another user's profile, or a look-alike directory
// holding that user's store), the inspect reads nothing of the other
// store (no session found, nothing counted) and says the store could not
// be reached.
func TestInspectRefusesSwappedStoreDir(t *testing.T) {
	for _, swap := range []string{"symlink", "look-alike"} {
		t.Run(swap, func(t *testing.T) {
			mine, bob := newReplayEnv(t), newReplayEnv(t)
			// bob's store has session s1 with A and B.
			half := bob.writeJSONL("half.jsonl", msg("user", "A", 1), msg("assistant", "B", 2))
			bob.replayTwice(half, ReplayOptions{SessionID: "s1"})
			// The transcript lies outside the directory that is swapped.
			b, err := os.ReadFile(mine.writeJSONL("s1.jsonl", msg("user", "A", 1), msg("assistant", "B", 2), msg("user", "C", 3)))
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(t.TempDir(), "s1.jsonl")
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			mine.w.Close()

			// Unswapped, alice's store has no s1.
			rep, err := Inspect(context.Background(), p, mine.db, ReplayOptions{})
			if err != nil || rep.SessionExists || rep.WouldAppend != 3 {
				t.Fatalf("alice's own store: %+v, %v", rep, err)
			}
			aside := mine.dir + "-aside"
			prev := inspectResolved
			t.Cleanup(func() { inspectResolved = prev; os.RemoveAll(aside) })
			inspectResolved = func(store.Store) {
				if err := os.Rename(mine.dir, aside); err != nil {
					t.Fatal(err)
				}
				if swap == "symlink" {
					err = os.Symlink(bob.dir, mine.dir)
				} else if err = os.Mkdir(mine.dir, 0o700); err == nil {
					for _, sfx := range []string{"", "-wal", "-shm"} {
						if err = os.Link(bob.db+sfx, mine.db+sfx); err != nil && !os.IsNotExist(err) {
							break
						}
						err = nil
					}
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			rep, err = Inspect(context.Background(), p, mine.db, ReplayOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.SessionExists || rep.WouldAppend != -1 || rep.AlreadyPresent != 0 {
				t.Fatalf("%s: the inspect read the other store: %+v", swap, rep)
			}
			if !strings.Contains(rep.StoreNote, "changed") && !strings.Contains(rep.StoreNote, "symlink") {
				t.Errorf("%s: the note does not say why: %q", swap, rep.StoreNote)
			}
		})
	}
}
