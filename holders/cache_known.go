package holders

import (
	"path/filepath"
	"slices"

	"github.com/stateguard/stateguard/fileid"
)

// The cache's memory of inodes: every file it has seen play a role in a
// store, so that scans after a rename-over or a rename aside still find
// an earlier generation's holders by inode (see Cache).

// knownFile is a remembered inode: held, when the last scan saw a holder
// of it; explicit counts the callers that vouch for it (Remember, less
// ForgetFiles): the guard and an incident's pins may both keep it alive;
// pins counts those of them whose fds keep the number from being reused.
type knownFile struct {
	KnownFile
	held     bool
	explicit int
	pins     int
}

// proven: the inode can be told from an unrelated file that got its
// number, by a live pin or by its birth time.
func (k knownFile) proven() bool { return k.pins > 0 || k.Birth != 0 }

// Remember adds inodes of earlier generations for every scan to look for
// until ForgetFiles: the guard's or pins' inodes (which the caller's own
// fds keep from being freed: Pinned), an incident's journaled generation
// after a restart (Birth). One with neither is kept but never looked for.
func (c *Cache) Remember(files ...KnownFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range files {
		c.learn(filepath.Clean(f.Store), f, false, true)
	}
}

// ForgetFiles undoes one Remember of each inode: the caller closed the
// fds that kept it alive. An inode nobody else vouches for is dropped,
// unless the last scans saw a process holding it (an orphan's renamed
// main, still being dealt with): then the next full scan that sees nobody
// holding it drops it.
func (c *Cache) ForgetFiles(files ...KnownFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range files {
		store := filepath.Clean(f.Store)
		m := c.known[store]
		k, ok := m.get(f.ID)
		if !ok {
			continue
		}
		if k.explicit > 0 {
			k.explicit--
		}
		if f.Pinned && k.pins > 0 {
			k.pins--
		}
		if k.explicit == 0 && !k.held {
			c.known[store] = m.without(f.ID)
			continue
		}
		m.put(k)
	}
}

// KnownFiles lists every inode the cache remembers for a store, at its
// paths or not.
func (c *Cache) KnownFiles(t Target) []KnownFile {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []KnownFile
	for _, k := range c.known[filepath.Clean(t.Path)] {
		out = append(out, k.KnownFile)
	}
	return out
}

// learnGeneration records every inode at the paths and every one a holder
// holds, which the next scans must still recognize; after a full scan it
// forgets the inodes neither at the paths nor held.
func (c *Cache) learnGeneration(s StoreResult, full bool) {
	held := map[fileid.ID]bool{}
	for _, p := range s.Holders {
		for _, f := range p.Files {
			held[f.ID] = true
			c.learn(s.Target.Path, KnownFile{Role: f.Role, ID: f.ID, Path: f.HostPath, Birth: f.Birth}, true, false)
		}
	}
	current := map[fileid.ID]bool{}
	for ri, r := range Roles {
		if st := s.Current.Of(r); st.Exists && st.Mode.IsRegular() {
			current[st.ID] = true
			c.learn(s.Target.Path, KnownFile{Role: r, ID: st.ID, Path: s.Target.RolePath(r), Birth: s.births[ri]}, held[st.ID], false)
		}
	}
	if !full {
		return
	}
	m := slices.DeleteFunc(c.known[s.Target.Path], func(k knownFile) bool { return k.explicit == 0 && !current[k.ID] && !held[k.ID] })
	for i := range m {
		m[i].held = held[m[i].ID]
	}
	if len(m) > 0 || c.known[s.Target.Path] != nil {
		c.known[s.Target.Path] = m
	}
}

// learn adds f; held only ever turns on here, explicit adds one vouching.
func (c *Cache) learn(store string, f KnownFile, held, explicit bool) {
	if f.ID.IsZero() {
		return
	}
	if c.known == nil {
		c.known = make(map[string]knownSet)
	}
	m := c.known[store]
	f.Store = store
	k, ok := m.get(f.ID)
	if ok {
		if f.Path == "" {
			f.Path = k.Path
		}
		if f.Birth == 0 {
			f.Birth = k.Birth
		}
	}
	n, pins := k.explicit, k.pins
	if explicit {
		n++
		if f.Pinned {
			pins++
		}
	}
	f.Pinned = false // pins says whether it is pinned now
	if !m.put(knownFile{KnownFile: f, held: held || k.held, explicit: n, pins: pins}) {
		c.known[store] = append(m, knownFile{KnownFile: f, held: held || k.held, explicit: n, pins: pins})
	}
}

// knownSet is one store's remembered inodes: a handful (its current
// files, an orphan's), so a slice, not a map per store.
type knownSet []knownFile

func (m knownSet) get(id fileid.ID) (knownFile, bool) {
	for _, k := range m {
		if k.ID == id {
			return k, true
		}
	}
	return knownFile{}, false
}

// put replaces the entry for k's inode, and reports whether there was one.
func (m knownSet) put(k knownFile) bool {
	for i := range m {
		if m[i].ID == k.ID {
			m[i] = k
			return true
		}
	}
	return false
}

func (m knownSet) without(id fileid.ID) knownSet {
	return slices.DeleteFunc(m, func(k knownFile) bool { return k.ID == id })
}
