package holders

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/stateguard/stateguard/fileid"
)

// deletedSuffix is what Linux appends to the link text of an unlinked
// file. A file may really be named so, so it is a hint only: identity
// decides whether an inode is current.
const deletedSuffix = " (deleted)"

// observation is one open file or mapping seen in a process, before it is
// matched against the stores.
type observation struct {
	path       string // the holder's view of the path, deletedSuffix stripped
	host       string // the host's view, when known ("" otherwise)
	fd         int    // -1 for a mapping
	mapped     bool
	id         fileid.ID
	nlink      uint64
	birth      int64 // an earlier generation's inode's birth time, as verified
	nlinkKnown bool
	owner      int // the file's owner (st_uid), when ownerKnown
	ownerKnown bool
	own        bool   // seen in the scan's own mount namespace: path is the host's view
	fdWrite    bool   // fd open O_WRONLY/O_RDWR
	mapWrite   bool   // shared writable mapping
	mapRange   string // a mapping's "start-end", its name under map_files/
}

// holding is one Held of one store (index into watch.targets).
type holding struct {
	store int
	held  Held
}

// idRef is one role of one store that an inode plays.
type idRef struct {
	store   int
	role    Role
	current bool
	path    string // where the host saw it (the role's path when current)
	birth   int64  // its birth time (statx btime, ns) when known, to tell a reused inode number
	pinned  bool   // an earlier generation's inode someone's fd keeps from being reused
}

// watch is the set of stores of one scan with what is at their paths now,
// and the index of every inode the scan looks for.
type watch struct {
	targets []Target
	base    []string
	// byDir maps every spelling of a store's directory as a process may
	// see it (as given, and with symlinks resolved, which is what the
	// kernel reports) to the stores in it.
	byDir map[string][]int
	// ids is the index the scan matches by: every current file of every
	// store, and every inode of an earlier generation it was told of.
	// An inode may play roles in several stores. Read it through refs:
	// patch overrides it.
	ids map[fileid.ID][]idRef
	// patch is what changed in ids since it was built (a nil or empty
	// value: the inode is no longer indexed), when this index is an
	// earlier one's patched for the few stores that changed (patched).
	// Neither map is written once the watch is published.
	patch map[fileid.ID][]idRef
	// roleBases are the base names of every role of every store, for
	// the name rule where directories cannot be compared.
	roleBases map[string]bool
	// kdev maps the device numbers the kernel prints in /proc/<pid>/maps
	// and /proc/locks (the superblock's) to stat(2)'s where they differ
	// (btrfs subvolumes).
	kdev map[uint64]uint64
	// index is each target's place in targets, by its cleaned path.
	index map[string]int
	// stats are what was read (or reused) at each target's paths (its
	// files, directory and read error); stated counts those read, and
	// reindexed the stores whose entries this index (re)built.
	stats     []*pathStat
	stated    int
	reindexed int
	known     []KnownFile // as given, to tell whether the next scan may reuse this one
}

// pathStat is what one scan read at a store's paths: its files, their
// birth times, its directory and the directory's real path. A later scan
// whose caller knows nothing changed at those paths since (a watched
// directory that sent no event: Options.Unchanged) reuses it instead of
// reading them again. It is never changed once made.
type pathStat struct {
	cur   Files
	birth [3]int64 // by index in Roles
	dir   fileid.State
	real  string // the directory with symlinks resolved; "" when unknown
	err   error  // what could not be read (not a missing file)
}

// cleanPath is filepath.Clean, without its walk of every byte for an
// absolute path that is clean already (every store's, every scan).
func cleanPath(p string) string {
	if isClean(p) {
		return p
	}
	return filepath.Clean(p)
}

// isClean reports whether p is an absolute path filepath.Clean leaves as
// it is: no empty, "." or ".." element and no trailing slash. One pass:
// every full scan asks it of every store's path, and six substring
// searches a path were a tenth of an idle 10,000-store agent's CPU.
func isClean(p string) bool {
	if len(p) < 2 || p[0] != '/' || p[len(p)-1] == '/' {
		return false
	}
	start := 1 // of the current element
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		switch p[start:i] {
		case "", ".", "..":
			return false
		}
		start = i + 1
	}
	return true
}

// at is s[i], nil past its end.
func at(s []*pathStat, i int) *pathStat {
	if i < len(s) {
		return s[i]
	}
	return nil
}

// watchFor is the index of one scan. Each target's paths are read unless
// o.reuse has them (the caller vouches nothing changed there); a read
// that finds what o.last had is that same pathStat. When every target
// then has its pathStat of o.prev (the last full scan's index), with the
// same known files, the index is o.prev again: an idle reconcile costs no
// rebuild of a map per store. When only a few stores differ, it is o.prev
// patched for those (patched): one store changing among thousands does
// not rebuild the index of them all.
func watchFor(targets []Target, o Options) *watch {
	stats := make([]*pathStat, len(targets))
	stated := 0
	real := realDirs{}
	for i, t := range targets {
		ps := at(o.reuse, i)
		if ps == nil {
			ps = statPaths(Target{Path: cleanPath(t.Path), Dir: t.Dir}, real)
			stated++
			if old := at(o.last, i); old != nil && old.same(ps) {
				ps = old
			}
		}
		stats[i] = ps
	}
	if p := o.prev; p != nil && p.builtFrom(targets, stats, o.Known) {
		cp := *p // the maps are never written after the build: shared
		cp.stated, cp.reindexed = stated, 0
		return &cp
	}
	if p := o.prev; p != nil {
		if w := p.patched(targets, stats, o.Known); w != nil {
			w.stated = stated
			return w
		}
	}
	w := buildWatch(targets, stats)
	w.known, w.stated, w.reindexed = o.Known, stated, len(w.targets)
	w.addKnown(o.Known)
	return w
}

func (w *watch) builtFrom(targets []Target, stats []*pathStat, known []KnownFile) bool {
	if len(targets) != len(w.targets) || !slices.Equal(known, w.known) {
		return false
	}
	// The same set of targets, in any order; in the same order (the
	// caller's usually is) without a map lookup each.
	ordered := len(w.index) == len(w.targets)
	for i, t := range targets {
		if ordered && w.targets[i].Path == t.Path {
			if stats[i] != w.stats[i] {
				return false
			}
			continue
		}
		ordered = false
		j, ok := w.index[t.Path]
		if !ok {
			j, ok = w.index[filepath.Clean(t.Path)]
		}
		if !ok || stats[i] != w.stats[j] {
			return false
		}
	}
	return len(w.index) == len(w.targets)
}

// same reports whether two reads of a store's paths found the same.
func (ps *pathStat) same(o *pathStat) bool {
	return ps.err == nil && o.err == nil && ps.birth == o.birth && ps.dir == o.dir && ps.real == o.real && ps.cur == o.cur
}

func buildWatch(targets []Target, stats []*pathStat) *watch {
	w := &watch{byDir: make(map[string][]int), ids: make(map[fileid.ID][]idRef), roleBases: make(map[string]bool),
		index: make(map[string]int, len(targets)),
		stats: make([]*pathStat, 0, len(targets))}
	for _, t := range targets {
		t.Path = filepath.Clean(t.Path)
		i := len(w.targets)
		w.targets = append(w.targets, t)
		if _, dup := w.index[t.Path]; !dup {
			w.index[t.Path] = i
		}
		w.base = append(w.base, filepath.Base(t.Path))
		ps := stats[i]
		w.stats = append(w.stats, ps)
		for ri, r := range Roles {
			st := ps.cur.Of(r)
			w.roleBases[filepath.Base(t.RolePath(r))] = true
			// Only a regular file can be a store's file: a FIFO or a
			// device node put at the path is nobody's generation.
			if st.Exists && st.Mode.IsRegular() {
				w.addID(st.ID, idRef{store: i, role: r, current: true, path: t.RolePath(r), birth: ps.birth[ri]})
			}
		}
		dir := filepath.Dir(t.Path)
		w.addDir(dir, i)
		if ps.real != "" && ps.real != dir {
			w.addDir(ps.real, i)
		}
		w.addKernelDev(dir, ps.dir)
	}
	return w
}

func (w *watch) storeIndex(path string) int {
	if i, ok := w.index[filepath.Clean(path)]; ok {
		return i
	}
	return -1
}

// realDirs is the spelling the kernel reports (symlinks resolved) of
// store directories, each parent looked at once: many stores share a
// parent (a home's profiles/), and looking at every component of every
// store's directory at every scan was most of a scan of thousands of idle
// stores.
//
// It never follows a symlink. Discovery records store paths resolved, so
// a symlink on one now was put there since (a directory swapped for a
// link to another user's); resolving it would make the other directory's
// files this store's by name, and their holders orphan writers of it. Such
// a directory gets no second spelling: the name rule looks only at the
// path as recorded, and the inode rule is unaffected.
type realDirs map[string]string

// of is dir when no component of it is a symlink (each checked with
// lstat, from the parent down, once per scan), else "".
func (m realDirs) of(dir string) (string, bool) {
	if r, ok := m[dir]; ok {
		return r, r != ""
	}
	parent := filepath.Dir(dir)
	r := ""
	switch fi, err := os.Lstat(dir); {
	case err != nil:
	case parent == dir:
		r = dir
	case fi.Mode()&fs.ModeSymlink != 0:
		// Not followed (see realDirs).
	default:
		if p, ok := m.of(parent); ok {
			r = filepath.Join(p, filepath.Base(dir))
		}
	}
	if r == dir {
		r = dir // the caller's string, not a copy kept per store
	}
	m[dir] = r
	return r, r != ""
}

func (w *watch) addID(id fileid.ID, r idRef) {
	w.ids[id] = append(w.ids[id], r)
}

func (w *watch) addDir(dir string, i int) {
	if !slices.Contains(w.byDir[dir], i) {
		w.byDir[dir] = append(w.byDir[dir], i)
	}
}

// statDev translates a kernel-printed device to stat(2)'s encoding.
func (w *watch) statDev(dev uint64) uint64 {
	if d, ok := w.kdev[dev]; ok {
		return d
	}
	return dev
}

// splitDir splits a path at its last slash.
func splitDir(p []byte) (dir, base []byte, ok bool) {
	i := bytes.LastIndexByte(p, '/')
	if i < 0 {
		return nil, nil, false
	}
	if i == 0 {
		return p[:1], p[1:], true
	}
	return p[:i], p[i+1:], true
}

// trimDeleted strips the kernel's " (deleted)" hint from a link text.
func trimDeleted(p []byte) []byte {
	return bytes.TrimSuffix(p, []byte(deletedSuffix))
}

// candidate reports whether a link or mapping path lies in a watched
// directory. It is the cheap filter for processes of the scan's own mount
// namespace, applied before any stat.
func (w *watch) candidate(p []byte) bool {
	dir, _, ok := splitDir(p)
	if !ok {
		return false
	}
	_, ok = w.byDir[string(dir)]
	return ok
}

// roleBase reports whether p's base name is a role's name in some store.
func (w *watch) roleBase(p []byte) bool {
	_, base, ok := splitDir(p)
	return ok && w.roleBases[string(base)]
}

// match classifies obs against every store: by identity first (an inode
// at a role's path now is current, an inode of a known earlier generation
// an orphan, whatever name the holder knows it by), then by name (an
// inode never seen, opened under a role's name in the store's directory,
// is an orphan of that role). The name rule compares directories as the
// host sees them: an observation from another mount namespace takes part
// only when its host path is known.
func (w *watch) match(obs []observation) []holding {
	var out []holding
	for _, o := range obs {
		if refs := w.refs(o.id); len(refs) > 0 {
			for _, r := range refs {
				out = mergeHolding(out, holding{store: r.store, held: w.held(o, r.store, r.role, r.current, MatchInode, r.path)})
			}
			continue
		}
		where := o.path
		if !o.own {
			where = o.host
		}
		dir, base, ok := splitDir([]byte(where))
		if !ok {
			continue
		}
		for _, i := range w.byDir[string(dir)] {
			for _, r := range Roles {
				if string(base) == w.base[i]+r.Suffix() {
					out = mergeHolding(out, holding{store: i, held: w.held(o, i, r, false, MatchName, where)})
				}
			}
		}
	}
	return out
}

// held turns an observation into the Held of one role.
func (w *watch) held(o observation, store int, r Role, current bool, m Match, knownPath string) Held {
	h := Held{Role: r, Path: o.path, HostPath: o.host, FD: o.fd, Mapped: o.mapped, ID: o.id, Nlink: o.nlink,
		Current: current, Match: m, FDWrite: o.fdWrite, MapWrite: o.mapWrite, Access: AccessRead, Birth: o.birth, Owner: -1}
	if o.ownerKnown {
		h.Owner = o.owner
	}
	if current {
		h.Birth, _ = w.birthOf(o.id)
	}
	if o.own && h.HostPath == "" {
		h.HostPath = o.path
	}
	if h.HostPath == "" && current {
		h.HostPath = knownPath
	}
	if current && !o.nlinkKnown {
		h.Nlink = w.stats[store].cur.Of(r).Nlink
	}
	if current && !o.ownerKnown {
		h.Owner = w.stats[store].cur.Of(r).UID
	}
	if o.fd >= 0 {
		h.Evidence = append(h.Evidence, EvidenceFD)
	}
	if o.mapped {
		h.Evidence = append(h.Evidence, EvidenceMap)
	}
	if h.FDWrite || h.MapWrite {
		h.Access = AccessWrite
	}
	return h
}

// mergeHolding adds h, folding fds, mappings and locks of one inode into
// one Held that keeps the lowest fd (and its paths) and every evidence.
func mergeHolding(hs []holding, h holding) []holding {
	for j := range hs {
		o := &hs[j]
		if o.store != h.store || o.held.ID != h.held.ID || o.held.Role != h.held.Role {
			continue
		}
		o.held.Mapped = o.held.Mapped || h.held.Mapped
		o.held.FDWrite = o.held.FDWrite || h.held.FDWrite
		o.held.MapWrite = o.held.MapWrite || h.held.MapWrite
		o.held.Current = o.held.Current || h.held.Current
		if o.held.Owner < 0 {
			o.held.Owner = h.held.Owner
		}
		if h.held.FD >= 0 && (o.held.FD < 0 || h.held.FD < o.held.FD) {
			o.held.FD = h.held.FD
			o.held.Path = h.held.Path
			if h.held.HostPath != "" {
				o.held.HostPath = h.held.HostPath
			}
		}
		if o.held.HostPath == "" {
			o.held.HostPath = h.held.HostPath
		}
		if o.held.Path == "" {
			o.held.Path = h.held.Path
		}
		for _, e := range h.held.Evidence {
			if !o.held.has(e) {
				o.held.Evidence = append(o.held.Evidence, e)
			}
		}
		o.held.Access = mergeAccess(o.held.Access, h.held.Access)
		return hs
	}
	return append(hs, h)
}

// mergeAccess: write beats read beats unknown (an fd read shows what a
// lock could not).
func mergeAccess(a, b Access) Access {
	switch {
	case a == AccessWrite || b == AccessWrite:
		return AccessWrite
	case a == AccessRead || b == AccessRead:
		return AccessRead
	}
	return AccessUnknown
}
