package holders

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
)

// Cache remembers what the last scans found so that, when a store's
// generation changes, its known holders can be re-inspected (and frozen)
// in well under a millisecond, before a full scan could finish.
//
// It also remembers every inode it has seen play a role in a store (at
// the store's paths, or held as one of its files), so a later scan still
// finds the holders of an earlier generation by inode after a rename-over
// or a rename aside: including, through /proc/locks, a holder it cannot
// inspect. An inode is forgotten once a full scan sees nobody holding it
// and it is no longer at the store's paths. Callers add what they know
// beyond the scans with Remember.
//
// The zero value is ready to use (RuleLocks) and it is safe for
// concurrent use.
type Cache struct {
	mu     sync.Mutex
	rule   Rule
	last   *Result
	stores map[string]StoreResult
	procs  map[int]Process // metadata by pid, reused while StartTicks match
	known  map[string]map[FileID]KnownFile
}

// SetRule sets the verdict rule of the scans that follow.
func (c *Cache) SetRule(r Rule) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rule = r
}

// Rule is the verdict rule in effect.
func (c *Cache) Rule() Rule {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rule.orDefault()
}

// Remember adds inodes of earlier generations for the scans to look for
// (the guard's or pins' inodes, an incident's journaled generation after
// a restart). Like those the cache learns itself, they are forgotten once
// a full scan finds no holder.
func (c *Cache) Remember(files ...KnownFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range files {
		c.learn(filepath.Clean(f.Store), f)
	}
}

// KnownFiles lists the inodes the cache looks for in store beyond what
// is at its paths.
func (c *Cache) KnownFiles(t Target) []KnownFile {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Collect(maps.Values(c.known[filepath.Clean(t.Path)]))
}

// Scan runs a full host scan and remembers its result.
func (c *Cache) Scan(targets []Target) (*Result, error) {
	o, known := c.options(targets)
	res, err := scanAll(targets, known, o)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = res
	for _, s := range res.Stores {
		c.remember(s)
		c.prune(s)
	}
	return res, nil
}

// options are the scan options for targets: the rule, and every inode
// remembered for them.
func (c *Cache) options(targets []Target) (Options, map[int]Process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := Options{Rule: c.rule.orDefault()}
	for _, t := range targets {
		for _, f := range c.known[filepath.Clean(t.Path)] {
			o.Known = append(o.Known, f)
		}
	}
	return o, maps.Clone(c.procs)
}

// Last returns the result of the last full scan, or nil.
func (c *Cache) Last() *Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// Known returns the store's holders as last seen by a full or targeted
// scan, without looking at any process.
func (c *Cache) Known(t Target) (StoreResult, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.stores[filepath.Clean(t.Path)]
	return s, ok
}

// Targeted re-inspects only the processes last seen holding t, plus pids
// (for example a process a caller knows just opened the store), plus every
// process the lock table shows holding one of t's inodes. It sees no
// other process, so its verdict is never Clear: with no holder left it is
// Unknown until the next full scan. What the last full scan could not
// inspect is carried over.
func (c *Cache) Targeted(t Target, pids ...int) (*StoreResult, error) {
	t.Path = filepath.Clean(t.Path)
	o, known := c.options([]Target{t})
	c.mu.Lock()
	prev, seen := c.stores[t.Path]
	c.mu.Unlock()

	want := slices.Clone(pids)
	for _, p := range prev.Holders {
		want = append(want, p.Pid)
	}
	slices.Sort(want)
	want = slices.Compact(want)

	res, err := scanPids([]Target{t}, want, known, o)
	if err != nil {
		return nil, err
	}
	s := res.Stores[0]
	s.Blind = append(s.Blind, prev.Blind...)
	s.Uninspected = prev.Uninspected
	if s.RuleNote == "" {
		s.RuleNote = prev.RuleNote
	}
	if !seen {
		s.Blind = append(s.Blind, Blind{UID: -1, Scope: ScopeScan, Reason: "targeted scan before any full scan of this store: only the given pids were inspected"})
	}
	if len(s.Holders) == 0 {
		s.Blind = append(s.Blind, Blind{UID: -1, Scope: ScopeScan, Reason: fmt.Sprintf("targeted scan inspected only %d known pids; a full scan decides clear", len(want))})
	}
	s.Verdict = verdict(&s)

	c.mu.Lock()
	defer c.mu.Unlock()
	remembered := s
	remembered.Blind = prev.Blind
	c.remember(remembered)
	return &s, nil
}

// Forget drops what the cache knows of t.
func (c *Cache) Forget(t Target) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.stores, filepath.Clean(t.Path))
	delete(c.known, filepath.Clean(t.Path))
}

func (c *Cache) remember(s StoreResult) {
	if c.stores == nil {
		c.stores = make(map[string]StoreResult)
		c.procs = make(map[int]Process)
	}
	// Results are handed to callers; keep copies they cannot change.
	s.Current = maps.Clone(s.Current)
	s.Holders = slices.Clone(s.Holders)
	s.Blind = slices.Clone(s.Blind)
	for i, p := range s.Holders {
		s.Holders[i].Files = slices.Clone(p.Files)
		s.Holders[i].Cmdline = slices.Clone(p.Cmdline)
		if !p.Inspected {
			continue
		}
		// Its files' fds are re-checked by the next scans whatever
		// their link text says by then (renamed, unlinked elsewhere).
		p.Cmdline = slices.Clone(p.Cmdline)
		p.Files = slices.Clone(p.Files)
		if old, ok := c.procs[p.Pid]; ok && old.StartTicks == p.StartTicks {
			for _, f := range old.Files {
				if !slices.ContainsFunc(p.Files, func(g Held) bool { return g.FD == f.FD }) {
					p.Files = append(p.Files, f)
				}
			}
		}
		c.procs[p.Pid] = p
	}
	c.stores[s.Target.Path] = s
	// Keep metadata only for pids some store still lists.
	live := make(map[int]bool)
	for _, st := range c.stores {
		for _, p := range st.Holders {
			live[p.Pid] = true
		}
	}
	maps.DeleteFunc(c.procs, func(pid int, _ Process) bool { return !live[pid] })
	// Every inode at the paths, and every one a holder holds, is a
	// generation's file the next scans must still recognize.
	for _, r := range Roles {
		if st := s.Current[r]; st.Exists && st.Mode.IsRegular() {
			c.learn(s.Target.Path, KnownFile{Store: s.Target.Path, Role: r, ID: st.ID, Path: s.Target.RolePath(r)})
		}
	}
	for _, p := range s.Holders {
		for _, f := range p.Files {
			c.learn(s.Target.Path, KnownFile{Store: s.Target.Path, Role: f.Role, ID: f.ID, Path: f.HostPath})
		}
	}
}

func (c *Cache) learn(store string, f KnownFile) {
	if f.ID.IsZero() {
		return
	}
	if c.known == nil {
		c.known = make(map[string]map[FileID]KnownFile)
	}
	m := c.known[store]
	if m == nil {
		m = make(map[FileID]KnownFile)
		c.known[store] = m
	}
	f.Store = store
	if old, ok := m[f.ID]; ok && f.Path == "" {
		f.Path = old.Path
	}
	m[f.ID] = f
}

// prune forgets, after a full scan, the inodes of earlier generations
// that nobody holds any more: an inode number freed can be reused by an
// unrelated file, which must never be taken for a store's.
func (c *Cache) prune(s StoreResult) {
	held := map[FileID]bool{}
	for _, r := range Roles {
		if st := s.Current[r]; st.Exists {
			held[st.ID] = true
		}
	}
	for _, p := range s.Holders {
		for _, f := range p.Files {
			held[f.ID] = true
		}
	}
	maps.DeleteFunc(c.known[s.Target.Path], func(id FileID, _ KnownFile) bool { return !held[id] })
}
