//go:build unix

package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// ReadGeneration reads the store's generation (see the package-level
// ReadGeneration) through its directory's handle: the directory is reached
// without a symlink and must be the one discovery recorded, and every
// lstat and header read is relative to it, so a path component swapped
// during the read cannot make the worker compare another directory's
// files. A directory that changed is an error (a *DirChangedError) with
// every file Missing.
func (s Store) ReadGeneration() (Generation, error) {
	h, err := s.OpenDir()
	if err != nil {
		return Generation{Main: fileid.Missing(), WAL: fileid.Missing(), SHM: fileid.Missing()}, err
	}
	defer h.Close()
	return h.ReadGeneration(filepath.Base(s.Path))
}

// ReadGeneration reads the generation of the store file name in the
// directory, through the handle.
func (h *DirHandle) ReadGeneration(name string) (Generation, error) {
	return readGenerationRetry(inDir{h}, name)
}

// inDir reaches a store's files through its directory's handle.
type inDir struct{ h *DirHandle }

func (d inDir) join(name string) string { return d.h.Join(name) }

func (d inDir) lstat(name string) (fileid.State, error) {
	st, err := d.h.lstatAt(name)
	if errors.Is(err, unix.ENOENT) {
		return fileid.Missing(), nil
	}
	if err != nil {
		return fileid.Missing(), fmt.Errorf("lstat %s: %w", d.h.Join(name), err)
	}
	return stateOfStat(&st), nil
}

func (d inDir) open(name string) (*os.File, error) {
	fd, err := unix.Openat(d.h.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d.h.Join(name), Err: err}
	}
	return os.NewFile(uintptr(fd), d.h.Join(name)), nil
}

// stateOfStat is fileid.Of for a raw stat result.
func stateOfStat(st *unix.Stat_t) fileid.State {
	return fileid.State{Exists: true, ID: fileid.FromStat(st), Size: st.Size, Nlink: uint64(st.Nlink),
		Mode: fileid.ModeOf(uint32(st.Mode)), UID: int(st.Uid), GID: int(st.Gid)}
}
