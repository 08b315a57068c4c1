package recovery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/store"
)

// A replay on a profile's behalf reads only the profile's own regular
// files, opened through its directory without following a link, and a
// divert only with the bytes divert.json records.
func TestReplayInputChecks(t *testing.T) {
	e := newReplayEnv(t)
	e.w.Close()
	dirID := store.DirID{}
	if h, err := store.OpenDir(e.dir, store.DirID{}); err != nil {
		t.Fatal(err)
	} else {
		dirID = h.ID()
		h.Close()
	}
	sessions := filepath.Join(e.dir, "sessions")
	if err := os.Mkdir(sessions, 0o700); err != nil {
		t.Fatal(err)
	}
	body := []byte(msg("user", "mine", 1000.5) + "\n")
	own := filepath.Join(sessions, "s1.jsonl")
	if err := os.WriteFile(own, body, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	in := ReplayInput{ProfileDir: e.dir, Dir: dirID, SHA256: hex.EncodeToString(sum[:])}
	ctx := context.Background()

	// Someone else's private file, reached by a symlink at the queued name.
	secret := filepath.Join(t.TempDir(), "secret.jsonl")
	if err := os.WriteFile(secret, []byte(msg("user", "not yours", 1000.7)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(sessions, "s2.jsonl")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	linkedDir := filepath.Join(e.dir, "linked")
	if err := os.Symlink(filepath.Dir(secret), linkedDir); err != nil {
		t.Fatal(err)
	}
	// A file under sessions/recovered/ is stateguard's divert: without the
	// sum its divert.json records, nothing vouches for it.
	recovered := filepath.Join(sessions, divertRecoveredDir, "20261207T000000Z-abcdef")
	if err := os.MkdirAll(recovered, 0o700); err != nil {
		t.Fatal(err)
	}
	unsummed := filepath.Join(recovered, "s4.jsonl")
	if err := os.WriteFile(unsummed, body, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path string
		in         ReplayInput
	}{
		{"divert without a sha256", unsummed, ReplayInput{ProfileDir: e.dir, Dir: dirID}},
		{"symlink at the file", link, ReplayInput{ProfileDir: e.dir, Dir: dirID}},
		{"symlink on the way", filepath.Join(linkedDir, "secret.jsonl"), ReplayInput{ProfileDir: e.dir, Dir: dirID}},
		{"outside the profile", secret, ReplayInput{ProfileDir: e.dir, Dir: dirID}},
		{"sha256 differs", own, ReplayInput{ProfileDir: e.dir, Dir: dirID, SHA256: "00"}},
	} {
		rep, err := ReplayFile(ctx, e.db, c.path, ReplayOptions{Input: c.in})
		if !errors.Is(err, ErrUntrustedInput) || rep.Appended != 0 {
			t.Errorf("%s: %v (appended %d), want ErrUntrustedInput", c.name, err, rep.Appended)
		}
	}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(sessions, "s3.jsonl")
		if err := os.WriteFile(theirs, body, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(theirs, 4249, 4249); err != nil {
			t.Fatal(err)
		}
		if _, err := ReplayFile(ctx, e.db, theirs, ReplayOptions{Input: ReplayInput{ProfileDir: e.dir, Dir: dirID}}); !errors.Is(err, ErrUntrustedInput) {
			t.Errorf("another user's file in the profile: %v, want ErrUntrustedInput", err)
		}
	}
	// The profile's own file with the recorded hash replays.
	rep, err := ReplayFile(ctx, e.db, own, ReplayOptions{Input: in})
	if err != nil || rep.Appended != 1 {
		t.Fatalf("own file: %+v %v", rep, err)
	}
	// A store directory other than the recorded one is refused.
	other := dirID
	other.ID.Ino++
	if _, err := ReplayFile(ctx, e.db, own, ReplayOptions{Input: ReplayInput{ProfileDir: e.dir, Dir: other}}); !errors.Is(err, store.ErrDirChanged) {
		t.Fatalf("changed profile directory: %v, want ErrDirChanged", err)
	}
	e.open()
	e.expectRows("s1", "user|mine|1000.5")
}
