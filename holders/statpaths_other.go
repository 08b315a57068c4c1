//go:build !unix

package holders

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/stateguard/stateguard/fileid"
)

// statPaths reads what is at t's paths now, by name (no directory handles
// on this system; agentd runs on Linux and macOS only).
func statPaths(t Target, real realDirs) *pathStat {
	ps := &pathStat{}
	for ri, r := range Roles {
		st, birth, err := lstatFile(t.RolePath(r))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			ps.err = errors.Join(ps.err, err)
		}
		if ri < len(ps.cur) {
			ps.cur[ri], ps.birth[ri] = st, birth
		}
	}
	dir := filepath.Dir(t.Path)
	dst, err := statState(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		ps.err = errors.Join(ps.err, err)
	}
	ps.dir = dst
	ps.real, _ = real.of(dir)
	return ps
}

func statState(path string) (fileid.State, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileid.State{}, err
	}
	return fileid.Of(fi), nil
}
