package holders

import (
	"slices"

	"github.com/stateguard/stateguard/fileid"
)

// The inode index of a watch: which store, role and generation an inode
// is, and the birth times that tell a remembered inode from a reused
// number. Built by buildWatch, patched by patched, read by match.

// addKnown indexes the inodes of earlier generations the scan looks for.
func (w *watch) addKnown(known []KnownFile) {
	for _, k := range known {
		i := w.storeIndex(k.Store)
		if knownIndexed(w.ids[k.ID], i, k) {
			w.addID(k.ID, idRef{store: i, role: k.Role, path: k.Path, birth: k.Birth, pinned: k.Pinned})
		}
	}
}

// knownIndexed reports whether k, remembered for store i, is indexed as
// an earlier generation of it, refs being what its inode is indexed as
// so far.
func knownIndexed(refs []idRef, i int, k KnownFile) bool {
	if i < 0 || k.ID.IsZero() || !slices.Contains(Roles, k.Role) {
		return false
	}
	if !k.Pinned && k.Birth == 0 {
		return false // no proof it is still the same file: see KnownFile.Pinned
	}
	if slices.ContainsFunc(refs, func(r idRef) bool { return r.store == i }) {
		return false // current in this store: identity at the path wins
	}
	if b, _ := currentBirth(refs); b != 0 && k.Birth != 0 && b != k.Birth {
		// The number is another store's current file now, born after
		// the one remembered: freed and reused (a profile created
		// right after another closed its store). Holding it is
		// holding that store, not this one's past generation.
		return false
	}
	return true
}

// refs is what the inode id is indexed as.
func (w *watch) refs(id fileid.ID) []idRef {
	if r, ok := w.patch[id]; ok {
		return r
	}
	return w.ids[id]
}

// indexed reports whether the scan looks for the inode id.
func (w *watch) indexed(id fileid.ID) bool { return len(w.refs(id)) > 0 }

// birthOf is the birth time of the current file numbered id, where the
// filesystem records one.
func (w *watch) birthOf(id fileid.ID) (int64, bool) { return currentBirth(w.refs(id)) }

// currentBirth is the birth time of the current file among refs (the
// last that has one).
func currentBirth(refs []idRef) (birth int64, ok bool) {
	for _, r := range refs {
		if r.current && r.birth != 0 {
			birth, ok = r.birth, true
		}
	}
	return birth, ok
}

// pastBirth returns the birth time an earlier generation's inode had,
// when id is indexed only as such (ok false for a current file or one not
// indexed); pinned when someone's fd keeps the number from being reused.
// Without a pin a file with this identity is taken for it only when its
// birth time is that birth: otherwise it is an unrelated file that got
// the number.
func (w *watch) pastBirth(id fileid.ID) (birth int64, pinned, ok bool) {
	refs := w.refs(id)
	for _, r := range refs {
		if r.current {
			return 0, false, false
		}
		if r.birth != 0 {
			birth = r.birth
		}
		pinned = pinned || r.pinned
	}
	return birth, pinned, len(refs) > 0
}

// currentElsewhere returns the birth time of the current file numbered
// o.id when o, seen in the scan's own mount namespace through an fd, names
// it by a path that is none of the paths it is current at (a hard link or
// a rename aside would, and are told apart by the birth as well).
func (w *watch) currentElsewhere(o observation) (int64, bool) {
	birth, ok := w.birthOf(o.id)
	if !ok || !o.own || o.fd < 0 {
		return 0, false
	}
	for _, r := range w.refs(o.id) {
		if r.current && r.path == o.path {
			return 0, false
		}
	}
	return birth, true
}
