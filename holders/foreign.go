package holders

import (
	"fmt"
	"slices"
)

// A store's files are its owner's: the profile directory's owner made
// them, alone, through SQLite. Another user can put a file at a store's
// path (a rename out of a directory they can write, a hard link of a file
// they may write but do not own) and another user's process can hold a
// store's inode (an fd passed over a socket). Taken for the store's, such
// a file would be pinned and copied into the attacker's capture as root,
// and such a process frozen and killed. The scan sorts them out here, for
// every caller at once (docs/design.md §12).

// foreignFile says why h, a file a holder holds as one of t's roles, is
// not the store's own, or "" when it is (ForeignWhy).
func foreignFile(t Target, h *Held) string { return ForeignWhy(t, h.Role, h.Owner, h.Nlink) }

// ForeignWhy says why a file in role r of t, owned by owner (-1: not
// known) with nlink links, is not the store's own, or "" when it is (or
// when that cannot be told: no recorded directory, no owner known):
//   - its owner is not the profile directory's owner;
//   - it is a -wal or -shm with more than one link: a file SQLite makes
//     for one store and never links twice, so another link is someone
//     else's way in (and their process may write it through that name).
func ForeignWhy(t Target, r Role, owner int, nlink uint64) string {
	if t.Dir.ID.IsZero() {
		return ""
	}
	if owner >= 0 && owner != t.Dir.UID {
		return fmt.Sprintf("owned by uid %d, not by uid %d, the profile directory's owner", owner, t.Dir.UID)
	}
	if r != RoleMain && nlink > 1 {
		return fmt.Sprintf("the %s has %d links: SQLite never links one twice", r, nlink)
	}
	return ""
}

// foreignProcess says why p, a holder of t's files, must never be
// signalled for the store, or "" when it may be: a process of the store's
// owner may, and so may one holding SQLite's locks on the store (a
// connection, whoever runs it, which writes as SQLite does). Any other
// process of another user only holds an fd or a mapping it was given or
// opened; stopping it would let the store's owner stop anyone's process
// (a system bus that received the fd).
func foreignProcess(t Target, p *Process) string {
	if t.Dir.ID.IsZero() || p.UID < 0 || p.UID == t.Dir.UID {
		return ""
	}
	if slices.ContainsFunc(p.Files, func(h Held) bool { return h.has(EvidenceLock) }) {
		return ""
	}
	return fmt.Sprintf("uid %d is not the store's owner (uid %d) and holds none of SQLite's locks on it", p.UID, t.Dir.UID)
}

// splitForeign moves the files of files that are not t's own into the
// returned foreign list, each with its reason.
func splitForeign(t Target, files []Held) (own, foreign []Held) {
	for _, h := range files {
		if why := foreignFile(t, &h); why != "" {
			h.Foreign = why
			foreign = append(foreign, h)
			continue
		}
		own = append(own, h)
	}
	return own, foreign
}
