package holders

import (
	"slices"

	"github.com/stateguard/stateguard/fileid"
)

// patched is p, the last full scan's index, for the same targets in the
// same order whose paths now read stats, with the known files known,
// when only a few stores differ: their files (a rename-over, a new
// -wal) or what is remembered of them. Only the inodes those stores had
// or have are indexed again, in a patch over p's maps, which are shared
// and never written: one store changing among 10,000 rebuilt them all,
// and the garbage set off the GC just as the agent had to freeze a
// writer. nil when a full build is due: other targets, a store whose
// directory changed (its spellings, its device), or a patch grown past
// a fraction of the index (so a lookup stays one map or two).
func (p *watch) patched(targets []Target, stats []*pathStat, known []KnownFile) *watch {
	n := len(p.targets)
	if len(targets) != n || len(stats) != n || len(p.stats) != n || len(p.index) != n {
		return nil
	}
	limit := 64 + n/8 // inodes in the patch
	var changed []int
	for i, ps := range stats {
		if t := targets[i].Path; t != p.targets[i].Path && cleanPath(t) != p.targets[i].Path {
			return nil
		}
		old := p.stats[i]
		if ps == old {
			continue
		}
		if ps == nil || old == nil || ps.real != old.real || ps.dir.Exists != old.dir.Exists || ps.dir.ID.Dev != old.dir.ID.Dev {
			return nil
		}
		if changed = append(changed, i); len(changed) > limit {
			return nil
		}
	}
	var ids []fileid.ID // every inode a changed store had or has
	addFiles := func(ps *pathStat) {
		for _, r := range Roles {
			if st := ps.cur.Of(r); st.Exists && st.Mode.IsRegular() && !slices.Contains(ids, st.ID) {
				ids = append(ids, st.ID)
			}
		}
	}
	for _, i := range changed {
		addFiles(p.stats[i])
		addFiles(stats[i])
	}
	if !slices.Equal(known, p.known) {
		// The stores whose remembered files differ are changed too.
		was, is := p.knownByStore(p.known), p.knownByStore(known)
		for i := range is {
			if _, ok := was[i]; !ok {
				was[i] = nil
			}
		}
		for i, ks := range was {
			if i < 0 || slices.Equal(ks, is[i]) {
				continue // -1: no store's, never indexed
			}
			if !slices.Contains(changed, i) {
				changed = append(changed, i)
			}
			for _, k := range slices.Concat(ks, is[i]) {
				if !slices.Contains(ids, k.ID) {
					ids = append(ids, k.ID)
				}
			}
		}
		slices.Sort(changed)
	}
	if len(changed) == 0 || len(p.patch)+len(ids) > limit {
		return nil
	}
	w := *p
	w.stats, w.known, w.reindexed = stats, known, len(changed)
	w.patch = make(map[fileid.ID][]idRef, len(p.patch)+len(ids))
	for id, refs := range p.patch {
		w.patch[id] = refs
	}
	for _, id := range ids {
		w.patch[id] = w.reindex(id, p.refs(id), changed, known)
	}
	return &w
}

// reindex is what the inode id is indexed as when the stores changed
// (sorted) are indexed again, old being what it was: the same as a full
// build gives, the current files by store, then the earlier generations
// in the order known gives them.
func (w *watch) reindex(id fileid.ID, old []idRef, changed []int, known []KnownFile) []idRef {
	var refs []idRef
	for _, r := range old {
		if r.current && !slices.Contains(changed, r.store) {
			refs = append(refs, r)
		}
	}
	for _, i := range changed {
		ps, t := w.stats[i], w.targets[i]
		for ri, r := range Roles {
			if st := ps.cur.Of(r); st.Exists && st.Mode.IsRegular() && st.ID == id {
				refs = append(refs, idRef{store: i, role: r, current: true, path: t.RolePath(r), birth: ps.birth[ri]})
			}
		}
	}
	slices.SortStableFunc(refs, func(a, b idRef) int { return a.store - b.store })
	for _, k := range known {
		if k.ID != id {
			continue
		}
		if i := w.storeIndex(k.Store); knownIndexed(refs, i, k) {
			refs = append(refs, idRef{store: i, role: k.Role, path: k.Path, birth: k.Birth, pinned: k.Pinned})
		}
	}
	return refs
}

// knownByStore groups known by the index of its store (-1: none).
func (w *watch) knownByStore(known []KnownFile) map[int][]KnownFile {
	m := make(map[int][]KnownFile)
	for _, k := range known {
		i := w.storeIndex(k.Store)
		m[i] = append(m[i], k)
	}
	return m
}
