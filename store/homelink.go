package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/stateguard/stateguard/fileid"
)

// ErrUntrustedLink means a home or a profiles/ directory is a symlink the
// agent will not follow: its target belongs to someone else than the
// link's owner (or the account whose home it is), or is a system
// directory. Root agentd would otherwise guard, lock, signal and write in
// a directory the link's owner does not own.
var ErrUntrustedLink = errors.New("symlink to a directory its owner does not own")

// systemTrees are directories (and everything below them) that are never
// a Hermes home or profiles/ reached through a symlink, even when the link
// and the target have the same owner (root).
var systemTrees = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
	"/opt", "/proc", "/run", "/sbin", "/snap", "/srv", "/sys", "/usr",
	"/var/cache", "/var/db", "/var/lib", "/var/log", "/var/run", "/var/spool",
	"/Library", "/System", "/private/etc", "/private/var/db", "/private/var/root"}

// systemRoots are directories that are a system directory themselves but
// whose subdirectories belong to users.
var systemRoots = []string{"/", "/home", "/private", "/private/var", "/tmp", "/Users", "/var"}

func isSystemDir(p string) bool {
	p = filepath.Clean(p)
	for _, r := range systemRoots {
		if p == r {
			return true
		}
	}
	for _, t := range systemTrees {
		if p == t || strings.HasPrefix(p, t+"/") {
			return true
		}
	}
	return false
}

// followTrustedLink resolves the symlink at link to a directory and
// accepts it only when the target's owner is the link's owner, both are
// wantUID when that is known (>= 0: a passwd account's uid, or the home's
// owner for its profiles/), and the target is not a system directory. It
// returns the resolved target, resolved once: the owner is read from the
// target opened without following any symlink (OpenDir), so a link
// re-pointed between the resolution and the check cannot pass another
// directory's owner off as the target's.
func followTrustedLink(link string, wantUID int) (string, DirID, error) {
	lst, err := fileid.Lstat(link)
	if err != nil {
		return "", DirID{}, err
	}
	target, err := filepath.EvalSymlinks(link)
	if err != nil {
		return "", DirID{}, fmt.Errorf("resolve %s: %w", link, err)
	}
	h, err := OpenDir(target, DirID{})
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return "", DirID{}, fmt.Errorf("%s -> %s: not a directory", link, target)
		}
		return "", DirID{}, fmt.Errorf("%s -> %s: %w", link, target, err)
	}
	id := h.ID()
	h.Close()
	switch {
	case id.UID != lst.UID:
		return "", DirID{}, fmt.Errorf("%w: %s (uid %d) -> %s (uid %d)", ErrUntrustedLink, link, lst.UID, target, id.UID)
	case wantUID >= 0 && lst.UID != wantUID:
		return "", DirID{}, fmt.Errorf("%w: %s -> %s is owned by uid %d, the account is uid %d", ErrUntrustedLink, link, target, lst.UID, wantUID)
	case isSystemDir(target):
		return "", DirID{}, fmt.Errorf("%w: %s -> %s is a system directory", ErrUntrustedLink, link, target)
	}
	return target, id, nil
}

// untrustedLinkHint is what the operator can do about a refused link.
const untrustedLinkHint = "not watched; replace the link with the directory itself, or make the link and its target belong to the same user"

// profilesDir is the home's profiles/ directory, resolved when it is a
// trusted symlink. ok is false when there is none to list; prob is set
// when that is worth reporting.
func profilesDir(h Home) (dir string, prob Problem, ok bool) {
	dir = filepath.Join(h.Root, "profiles")
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", Problem{}, false
	case err != nil:
		return "", Problem{Path: dir, Err: fmt.Errorf("list profiles: %w", err),
			Hint: "named profiles of this home are not watched; check the directory's permissions"}, false
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _, err := followTrustedLink(dir, h.UID)
		if err != nil {
			return "", Problem{Path: dir, Err: err, Hint: "named profiles of this home are " + untrustedLinkHint}, false
		}
		return target, Problem{}, true
	case !fi.IsDir():
		return "", Problem{}, false
	}
	return dir, Problem{}, true
}

// lstatDirID records a store directory at discovery: a real directory,
// never a link to one.
func lstatDirID(dir string) (DirID, error) {
	st, err := fileid.Lstat(dir)
	if err != nil {
		return DirID{}, err
	}
	if !st.Exists || !st.Mode.IsDir() {
		return DirID{}, fmt.Errorf("store directory is not a directory (%v): %w", st.Mode.Type(), ErrNotRegular)
	}
	return DirID{ID: st.ID, UID: st.UID, GID: st.GID}, nil
}
