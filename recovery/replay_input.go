//go:build unix

package recovery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/store"
)

// ErrUntrustedInput means a JSONL the agent was asked to replay is not
// one it may read on the profile's behalf: a symlink, not a regular file,
// outside the profile, owned by another user, or (for a divert stateguard
// wrote) not the bytes its divert.json records.
var ErrUntrustedInput = errors.New("replay input refused")

// ReplayInput says where a replay's JSONL must come from when the agent
// replays on a profile's behalf (the daemon's replay queue). The zero
// value checks nothing beyond a regular file: the operator's own
// `agentctl replay` of a file they name.
type ReplayInput struct {
	// ProfileDir is the store's directory; the JSONL must be under it and
	// is opened from it one component at a time, never following a link.
	ProfileDir string
	// Dir is ProfileDir as discovery recorded it (zero: not compared).
	Dir store.DirID
	// SHA256, when set, is what the file must hash to (divert.json's
	// entry for a divert stateguard wrote).
	SHA256 string
}

func (in ReplayInput) set() bool { return in.ProfileDir != "" }

// openReplayInput opens path through the profile directory's handle:
// every directory below ProfileDir with O_NOFOLLOW, the file with
// O_NOFOLLOW|O_NONBLOCK; it must be a regular file owned by the profile's
// owner or root, and hash to in.SHA256 when that is set. The returned
// file is positioned at its start.
func openReplayInput(path string, in ReplayInput) (*os.File, error) {
	path = filepath.Clean(path)
	rel, err := filepath.Rel(in.ProfileDir, path)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") || filepath.IsAbs(rel) {
		return nil, fmt.Errorf("%w: %s is not under the profile directory %s", ErrUntrustedInput, path, in.ProfileDir)
	}
	d, err := openStoreDir(in.ProfileDir, in.Dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUntrustedInput, path, err)
	}
	parts := strings.Split(rel, string(filepath.Separator))
	for _, c := range parts[:len(parts)-1] {
		sub, err := d.openChildDir(c)
		d.close()
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w (a directory on the way is missing or a symlink)", ErrUntrustedInput, path, err)
		}
		d = sub
	}
	defer d.close()
	owner := d.want.UID
	name := parts[len(parts)-1]
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symlink: the agent replays only the profile's own files; replay the target yourself with agentctl replay if it is meant", ErrUntrustedInput, path)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	st, err := fstatFile(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	switch {
	case !isRegular(&st):
		f.Close()
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrUntrustedInput, path)
	case int(st.Uid) != owner && st.Uid != 0:
		f.Close()
		return nil, fmt.Errorf("%w: %s belongs to uid %d, the profile to uid %d: not replayed (move it away, or replay it yourself with agentctl replay)", ErrUntrustedInput, path, st.Uid, owner)
	}
	if in.SHA256 == "" && IsDivertPath(in.ProfileDir, path) {
		// A stateguard divert is replayed only as its divert.json's sum
		// says; an entry without one cannot vouch for the file.
		f.Close()
		return nil, fmt.Errorf("%w: %s is a stateguard divert but no sha256 was given for it (is it listed in its %s without one?): not replayed; check the file and replay it yourself with agentctl replay",
			ErrUntrustedInput, path, DivertManifestName)
	}
	if in.SHA256 != "" {
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			f.Close()
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		if sum := hex.EncodeToString(h.Sum(nil)); sum != in.SHA256 {
			f.Close()
			return nil, fmt.Errorf("%w: %s has sha256 %s, %s says %s: it changed after the divert; not replayed", ErrUntrustedInput, path, sum, DivertManifestName, in.SHA256)
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			f.Close()
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
	}
	return f, nil
}

// openWritableChecked opens the store for a replay on the profile's
// behalf through the profile directory's handle (store.OpenSQLiteIn): its
// directory is the recorded one (no symlink anywhere), the main is a
// regular file owned by the profile's owner or root, and after SQLite has
// opened it by name the name still leads to that same inode.
func openWritableChecked(ctx context.Context, dbPath string, in ReplayInput) (*store.Writable, error) {
	dbPath = filepath.Clean(dbPath)
	if filepath.Dir(dbPath) != filepath.Clean(in.ProfileDir) {
		return nil, fmt.Errorf("%w: store %s is not in the profile directory %s", ErrUntrustedInput, dbPath, in.ProfileDir)
	}
	w, err := store.OpenSQLiteIn(in.ProfileDir, in.Dir, filepath.Base(dbPath), func(p string) (*store.Writable, error) {
		return store.OpenWritable(ctx, p)
	})
	if errors.Is(err, store.ErrForeignOwner) {
		return nil, fmt.Errorf("%w: %w", ErrUntrustedInput, err)
	}
	return w, err
}

// IsDivertPath reports whether path is inside profileDir's
// sessions/recovered/, where only stateguard's own diverts live.
func IsDivertPath(profileDir, path string) bool {
	rel, err := filepath.Rel(filepath.Join(profileDir, divertSessionsDir, divertRecoveredDir), filepath.Clean(path))
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..")
}
