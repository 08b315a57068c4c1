package control

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/stateguard/stateguard/fileid"
)

// PrepareStateDir creates path (and missing parents) with mode 0700 and
// checks that it is safe to keep the journal in: a real directory, not a
// symlink, owned by the effective user, and not writable by group or
// others. Anyone who can write there could swap the journal or the lock
// under the agent, so each refusal says how to fix it.
func PrepareStateDir(path string) error {
	if path == "" {
		return errors.New("no state directory: set XDG_STATE_HOME or HOME, or pass one explicitly")
	}
	if !filepath.IsAbs(path) {
		return fmt.Errorf("state directory %s: not an absolute path", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create parent of state directory %s: %w", path, err)
	}
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create state directory %s: %w", path, err)
	}
	return checkStateDir(path)
}

func checkStateDir(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("state directory %s: %w", path, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(path)
		return fmt.Errorf("state directory %s is a symlink to %q: refusing it, since whoever controls the link controls the journal; point the agent at the real directory instead", path, target)
	}
	if !fi.IsDir() {
		return fmt.Errorf("state directory %s is not a directory (%s): move it aside", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("state directory %s has mode %04o, writable by others: refusing it; run `chmod 700 %s`", path, perm, path)
	}
	if uid := fileid.Of(fi).UID; uid >= 0 {
		if euid := os.Geteuid(); euid >= 0 && uid != euid {
			return fmt.Errorf("state directory %s is owned by uid %d, not by the agent's uid %d: refusing it; run `chown %d %s` or use another directory", path, uid, euid, euid, path)
		}
	}
	return nil
}
