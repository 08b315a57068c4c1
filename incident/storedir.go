package incident

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/store"
)

// The incident's own looks at the profile directory (is a snapshot or a
// staging capture there, when was the main replaced, which session files
// are there) go through the directory's handle: no symlink in any
// component, the directory discovery recorded. A directory that cannot be
// vouched for answers "nothing there": the step then does its work again
// (a new snapshot, a new staging capture) rather than trust a look-alike.

// lstatInStoreDir stats name, a name directly in the store's directory,
// without following a symlink.
func lstatInStoreDir(st store.Store, name string) (unix.Stat_t, error) {
	var s unix.Stat_t
	h, err := st.OpenDir()
	if err != nil {
		return s, err
	}
	defer h.Close()
	err = unix.Fstatat(h.Fd(), name, &s, unix.AT_SYMLINK_NOFOLLOW)
	return s, err
}

// existsInStoreDir reports whether path, a file or directory directly in
// the store's directory, is there.
func existsInStoreDir(st store.Store, path string) bool {
	if filepath.Dir(filepath.Clean(path)) != st.Dir() {
		return false
	}
	_, err := lstatInStoreDir(st, filepath.Base(path))
	return err == nil
}

// readStoreSubdir lists name, a directory directly in the store's
// directory, opened from its handle without following a symlink, with each
// regular entry's size (fstatat on the listed directory, never by name).
func readStoreSubdir(st store.Store, name string) ([]sessionFile, error) {
	h, err := st.OpenDir()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	fd, err := unix.Openat(h.Fd(), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	dir := h.Join(name)
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	var out []sessionFile
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		var s unix.Stat_t
		if err := unix.Fstatat(fd, e.Name(), &s, unix.AT_SYMLINK_NOFOLLOW); err != nil || s.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		out = append(out, sessionFile{path: filepath.Join(dir, e.Name()), size: s.Size})
	}
	return out, nil
}
