//go:build unix

package recovery

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/store"
)

// ErrNotACapture means RemoveCapture was asked to remove something that
// is not a finished capture of the store: nothing was removed.
var ErrNotACapture = errors.New("not a finished capture of the store")

// RemoveCapture removes the finished capture dir (<db>.retired-wal-*, a
// directory holding a manifest) of the store st, through the handle of
// the store's directory and of the capture's (never a path, never a
// symlink followed), and returns the bytes its files held; one that is
// gone already is an error wrapping fs.ErrNotExist. It is for the
// captures of resolved incidents, whose rows are in the store and in the
// incident's diverted JSONL: when a new capture does not fit, they are
// the space that can be given back. Anything else at that name (a
// symlink, a file, a capture still being written, a subdirectory inside)
// is refused with ErrNotACapture and left as it is.
func RemoveCapture(st store.Store, dir string) (int64, error) {
	base := filepath.Base(st.Path)
	name := filepath.Base(dir)
	if filepath.Dir(filepath.Clean(dir)) != filepath.Dir(filepath.Clean(st.Path)) ||
		!strings.HasPrefix(name, base+retiredInfix) || strings.HasSuffix(name, ".partial") {
		return 0, fmt.Errorf("remove capture %s: %w: it is not named <store>%s* next to %s", dir, ErrNotACapture, retiredInfix, st.Path)
	}
	d, err := openStoreDir(st.Dir(), st.DirID)
	if err != nil {
		return 0, fmt.Errorf("remove capture %s: %w", dir, err)
	}
	defer d.close()
	var lst unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &lst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			// Removed already (by the operator, or a previous try).
			return 0, fmt.Errorf("remove capture %s: %w", dir, fs.ErrNotExist)
		}
		return 0, fmt.Errorf("remove capture %s: %w", dir, err)
	}
	if lst.Mode&unix.S_IFMT != unix.S_IFDIR {
		return 0, fmt.Errorf("remove capture %s: %w: it is no directory (mode %#o)", dir, ErrNotACapture, lst.Mode)
	}
	sub, err := d.openChildDir(name)
	if err != nil {
		return 0, fmt.Errorf("remove capture %s: %w", dir, err)
	}
	entries, err := sub.readDir()
	if err != nil {
		sub.close()
		return 0, fmt.Errorf("remove capture %s: %w", dir, err)
	}
	var bytes int64
	manifest := false
	for _, e := range entries {
		st, err := sub.lstat(e.Name())
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			sub.close()
			return 0, fmt.Errorf("remove capture %s: %w: %s is not a regular file", dir, ErrNotACapture, e.Name())
		}
		manifest = manifest || e.Name() == ManifestName
		bytes += st.Blocks * 512
	}
	sub.close()
	if !manifest {
		return 0, fmt.Errorf("remove capture %s: %w: it has no %s", dir, ErrNotACapture, ManifestName)
	}
	if err := d.removeAll(name); err != nil {
		return 0, err
	}
	return bytes, d.sync()
}
