//go:build unix

package holders

import (
	"errors"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/store"
)

// statPaths reads what is at t's paths now, through the store's directory
// opened without following a symlink in any component of its path
// (store.OpenDir) and checked against t.Dir when that is recorded. The
// role files are then stat'd at that descriptor, never by name: a profile
// directory swapped for a symlink, or for another directory than the one
// discovery recorded, is refused (ps.err: the scan is blind for the
// store), and the files of wherever the link points are never taken for
// the store's current ones.
func statPaths(t Target, real realDirs) *pathStat {
	ps := &pathStat{}
	dir := filepath.Dir(t.Path)
	h, err := store.OpenDir(dir, store.DirID{ID: t.Dir.ID, UID: t.Dir.UID})
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			ps.err = err
		}
		return ps
	}
	defer h.Close()
	base := filepath.Base(t.Path)
	for ri, r := range Roles {
		st, birth, err := lstatFileAt(h.Fd(), dir, base+r.Suffix())
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			ps.err = errors.Join(ps.err, err)
		}
		if ri < len(ps.cur) {
			ps.cur[ri], ps.birth[ri] = st, birth
		}
	}
	var dst unix.Stat_t
	if err := unix.Fstat(h.Fd(), &dst); err != nil {
		ps.err = errors.Join(ps.err, &fs.PathError{Op: "fstat", Path: dir, Err: err})
	} else {
		ps.dir = stateOfStat(&dst)
	}
	ps.real, _ = real.of(dir)
	return ps
}

// stateOfStat is what fileid.Of makes of an os.Stat of the same file.
func stateOfStat(st *unix.Stat_t) fileid.State {
	return fileid.State{Exists: true, ID: fileid.FromStat(st), Size: st.Size, Mode: fileid.ModeOf(uint32(st.Mode)),
		Nlink: uint64(st.Nlink), UID: int(st.Uid), GID: int(st.Gid)}
}
