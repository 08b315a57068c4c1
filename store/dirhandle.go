package store

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/stateguard/stateguard/fileid"
)

// DirID is what discovery recorded about a store's directory: its inode
// and its owner. Every later step that reads or writes under the directory
// opens it again without following any symlink (OpenDir) and refuses it
// unless it is still this inode, owned by this user. A zero DirID (a
// caller that has no discovery record, such as an operator's standalone
// verb) still gets the no-symlink open, only not the comparison.
type DirID struct {
	ID  fileid.ID `json:"id"`
	UID int       `json:"uid"`
	GID int       `json:"gid"`
}

// IsZero reports whether nothing was recorded.
func (d DirID) IsZero() bool { return d.ID.IsZero() }

func (d DirID) String() string { return fmt.Sprintf("%v owned by uid %d", d.ID, d.UID) }

// ErrDirChanged means a store's directory is not the one discovery
// recorded: it was swapped, renamed, re-created or given away since. It
// wraps fileid.ErrIdentityChanged, so callers that only know that error
// still see it.
var ErrDirChanged = fmt.Errorf("store directory changed since discovery: %w", fileid.ErrIdentityChanged)

// ErrSymlinkInPath means a path that stateguard must reach without
// following links has a symlink in one of its components.
var ErrSymlinkInPath = errors.New("symlink in path")

// ErrForeignOwner means a file under a store directory belongs to neither
// the directory's owner nor root: stateguard does not read or write it on
// the directory's behalf.
var ErrForeignOwner = errors.New("file owned by another user")

// DirChangedError names the directory and says what differs.
type DirChangedError struct {
	Path      string
	Want, Got DirID
}

func (e *DirChangedError) Error() string {
	return fmt.Sprintf("%s: %v: discovery recorded %v, now %v; nothing was written. "+
		"If the change is intended, the next rescan picks the new directory up", e.Path, ErrDirChanged, e.Want, e.Got)
}

func (e *DirChangedError) Unwrap() error { return ErrDirChanged }

// DirHandle is a store directory opened without following a symlink in any
// component of its path and checked against its DirID. Work under it uses
// the *at system calls on Fd, so a path component swapped after the check
// cannot redirect it. Close releases the fd.
type DirHandle struct {
	path string
	fd   int
	id   DirID
	want DirID
}

// Path is the directory's absolute path as it was opened.
func (h *DirHandle) Path() string { return h.path }

// Fd is the directory's descriptor; valid until Close or Detach.
func (h *DirHandle) Fd() int { return h.fd }

// ID is what the open directory is.
func (h *DirHandle) ID() DirID { return h.id }

// Join is the path of name in the directory, for messages.
func (h *DirHandle) Join(name string) string { return filepath.Join(h.path, name) }

// Detach hands the fd over to the caller, who closes it; Close then does
// nothing.
func (h *DirHandle) Detach() int {
	fd := h.fd
	h.fd = -1
	return fd
}

// OpenDir opens the directory at the absolute path without following a
// symlink in any component (Linux: openat2 with RESOLVE_NO_SYMLINKS; other
// systems and old kernels: O_NOFOLLOW|O_DIRECTORY component by component)
// and, when want is set, refuses it with a *DirChangedError unless it is
// that inode with that owner.
func OpenDir(path string, want DirID) (*DirHandle, error) {
	path = filepath.Clean(path)
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("open directory %s: not an absolute path", path)
	}
	fd, err := openDirNoSymlinks(path)
	if err != nil {
		return nil, err
	}
	h := &DirHandle{path: path, fd: fd, want: want}
	id, err := fstatDir(fd)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("stat directory %s: %w", path, err)
	}
	h.id = id
	if !want.IsZero() && !sameDir(want, id) {
		h.Close()
		return nil, &DirChangedError{Path: path, Want: want, Got: id}
	}
	return h, nil
}

// Verify checks again that the open directory is still owned by the
// recorded user and that its path still leads to it without a symlink:
// a step calls it before it publishes anything, so a directory renamed
// away or replaced during the step aborts the step.
func (h *DirHandle) Verify() error {
	id, err := fstatDir(h.fd)
	if err != nil {
		return fmt.Errorf("stat directory %s: %w", h.path, err)
	}
	want := h.want
	if want.IsZero() {
		want = h.id
	}
	if !sameDir(want, id) {
		return &DirChangedError{Path: h.path, Want: want, Got: id}
	}
	fd, err := openDirNoSymlinks(h.path)
	if err != nil {
		return &DirChangedError{Path: h.path, Want: want, Got: DirID{UID: -1, GID: -1}}
	}
	now, err := fstatDir(fd)
	closeFd(fd)
	if err != nil || !sameDir(want, now) {
		return &DirChangedError{Path: h.path, Want: want, Got: now}
	}
	return nil
}

// Close releases the fd.
func (h *DirHandle) Close() {
	if h != nil && h.fd >= 0 {
		closeFd(h.fd)
		h.fd = -1
	}
}

func sameDir(want, got DirID) bool {
	return want.ID == got.ID && want.UID == got.UID
}
