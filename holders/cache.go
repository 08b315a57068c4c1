package holders

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"

	"github.com/stateguard/stateguard/fileid"
)

// Cache remembers what the last scans found so that, when a store's
// generation changes, its known holders can be re-inspected (and frozen)
// in well under a millisecond, before a full scan could finish.
//
// It also remembers every inode it has seen play a role in a store (at
// the store's paths, or held as one of its files), so a later scan still
// finds the holders of an earlier generation by inode after a rename-over
// or a rename aside: including, through /proc/locks, a holder it cannot
// inspect. Only inodes someone held at the last scan are looked for: an
// inode nobody holds can be freed and its number given to an unrelated
// file, which must never be taken for a store's. Nor is an inode nobody
// pins unless its birth time is known to tell it from such a file (see
// KnownFile.Pinned): a held inode's holder may close it right after the
// scan. An inode is forgotten once a
// full scan sees nobody holding it and it is no longer at the store's
// paths. Callers add what they know beyond the scans with Remember.
//
// The zero value is ready to use (RuleLocks) and it is safe for
// concurrent use.
type Cache struct {
	mu    sync.Mutex
	rule  Rule
	kept  func(pid int, id fileid.ID) bool // Options.Kept
	last  *Result
	procs map[int]Process // metadata by pid, reused while StartTicks match
	// refs counts the stores whose holders list each pid in procs, so
	// replacing one store's result costs its own holders, not a walk of
	// every store: a full scan of N stores stays linear in N.
	refs  map[int]int
	known map[string]knownSet
	// stats are the last reads of each store's paths (ScanReusing);
	// lastWatch the last full scan's index, for the next to reuse.
	stats     map[string]*pathStat
	lastWatch *watch
	// touched are the stores whose kept result something other than a
	// full scan replaced or dropped since the last full scan (Targeted,
	// Forget): a full scan that reuses a store's last result must keep
	// it again for those only.
	touched map[string]bool
	// view is each store's last result (path → *StoreResult, never
	// written once stored), the one copy kept: written under c.mu, read
	// by Known without it, since every store's fast freeze reads its own
	// entry and must not wait on c.mu while a full scan of thousands of
	// stores is being remembered.
	view sync.Map
}

// stored is the result kept for a store.
func (c *Cache) stored(path string) (*StoreResult, bool) {
	v, ok := c.view.Load(path)
	if !ok {
		return nil, false
	}
	return v.(*StoreResult), true
}

// SetRule sets the verdict rule of the scans that follow.
func (c *Cache) SetRule(r Rule) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rule = r
}

// SetKept names the files processes hold on the agent's behalf
// (Options.Kept); set before the first scan.
func (c *Cache) SetKept(kept func(pid int, id fileid.ID) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kept = kept
}

// Rule is the verdict rule in effect.
func (c *Cache) Rule() Rule {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rule.orDefault()
}

// Scan runs a full host scan and remembers its result.
func (c *Cache) Scan(targets []Target) (*Result, error) { return c.ScanReusing(targets, nil) }

// ScanReusing is Scan, except that it does not read again the paths of a
// target i for which unchanged[i] says nothing changed there since the
// last scan that read them (a watched directory that sent no event):
// what that scan read stands. Every process is inspected all the same.
// A target never read before is read; nil unchanged reads them all.
//
// A store whose paths are as the last full scan left them and that
// nobody holds gets that scan's result again (Result.Reused), with no
// work per store but a comparison: an idle reconcile of thousands of
// stores rebuilds nothing.
func (c *Cache) ScanReusing(targets []Target, unchanged []bool) (*Result, error) {
	o, known := c.options(targets, unchanged)
	res, err := scanAll(targets, known, o)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = res
	c.lastWatch = res.w
	var byPath map[string]int // targets' indexes, when res's order is not theirs
	for i := range res.Stores {
		s := &res.Stores[i]
		if !res.Reused(i) || (c.touched[s.Target.Path] && !c.quietKept(s)) {
			c.remember(*s, true)
		}
		j := i
		if j >= len(targets) || (targets[j].Path != s.Target.Path && cleanPath(targets[j].Path) != s.Target.Path) {
			if byPath == nil {
				byPath = make(map[string]int, len(targets))
				for k, t := range targets {
					byPath[cleanPath(t.Path)] = k
				}
			}
			j = byPath[s.Target.Path]
		}
		if ps := at(o.reuse, j); ps == nil || i >= len(res.stats) || ps != res.stats[i] {
			// Reused: already kept, or since replaced by a fresher read
			// (a targeted scan's), which stands.
			c.keepStat(s.Target.Path, res.stats, i)
		}
	}
	clear(c.touched)
	return res, nil
}

// touch marks a store's kept result as replaced or dropped outside a
// full scan. c.mu is held.
func (c *Cache) touch(path string) {
	if c.touched == nil {
		c.touched = make(map[string]bool)
	}
	c.touched[path] = true
}

// quietKept reports whether the result kept for a store reused from the
// last full scan is still that full scan's (no targeted scan replaced it
// since), so remembering it again would change nothing. c.mu is held.
func (c *Cache) quietKept(s *StoreResult) bool {
	old, ok := c.stored(s.Target.Path)
	return ok && old.full && len(old.Holders) == 0 && len(s.Holders) == 0 && quietSame(old, s)
}

// keepStat keeps what a scan read at a store's paths, for ScanReusing;
// a read that failed is not kept (the next scan reads again). c.mu is
// held.
func (c *Cache) keepStat(path string, stats []*pathStat, i int) {
	if i >= len(stats) || stats[i] == nil {
		return
	}
	if c.stats == nil {
		c.stats = make(map[string]*pathStat)
	}
	if ps := stats[i]; ps.err == nil {
		c.stats[path] = ps
	} else {
		delete(c.stats, path)
	}
}

// options are the scan options for targets: the rule, every inode
// remembered for them, and the earlier reads of the paths unchanged
// vouches for (nil: none).
func (c *Cache) options(targets []Target, unchanged []bool) (Options, map[int]Process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// last, for every scan: a read that finds what the last one did is
	// that read (the same pathStat), so the next full scan may still
	// reuse the store's result (a targeted scan reads its store too).
	o := Options{Rule: c.rule.orDefault(), Kept: c.kept, last: make([]*pathStat, len(targets))}
	if unchanged != nil {
		o.prev, o.prevRes = c.lastWatch, c.last
		o.reuse = make([]*pathStat, len(targets))
	}
	for i, t := range targets {
		p := cleanPath(t.Path)
		if ps := c.stats[p]; ps != nil {
			o.last[i] = ps
			if i < len(unchanged) && unchanged[i] {
				o.reuse[i] = ps
			}
		}
		for _, f := range c.known[p] {
			if (f.held || f.explicit > 0) && f.proven() {
				k := f.KnownFile
				k.Pinned = f.pins > 0
				o.Known = append(o.Known, k)
			}
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
	s, ok := c.stored(filepath.Clean(t.Path))
	if !ok {
		return StoreResult{}, false
	}
	return *s, true
}

// Targeted re-inspects only the processes last seen holding t, plus pids
// (for example a process a caller knows just opened the store), plus every
// process the lock table shows holding one of t's inodes. It sees no
// other process, so its verdict is never Clear: with no holder left it is
// Unknown until the next full scan. What the last full scan could not
// inspect is carried over.
func (c *Cache) Targeted(t Target, pids ...int) (*StoreResult, error) {
	t.Path = filepath.Clean(t.Path)
	o, known := c.options([]Target{t}, nil)
	c.mu.Lock()
	var prev StoreResult
	p, seen := c.stored(t.Path)
	if seen {
		prev = *p
	}
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
	c.remember(remembered, false)
	c.touch(t.Path)
	c.keepStat(t.Path, res.stats, 0)
	return &s, nil
}

// Forget drops what the cache knows of t.
func (c *Cache) Forget(t Target) {
	c.mu.Lock()
	defer c.mu.Unlock()
	path := filepath.Clean(t.Path)
	if old, ok := c.stored(path); ok {
		c.unref(old.Holders)
	}
	c.view.Delete(path)
	c.touch(path)
	delete(c.known, path)
	delete(c.stats, path)
}

// remember keeps a result. After a full scan, what it saw decides which
// inodes count as held; a targeted scan, which saw only some processes,
// can only add to that.
func (c *Cache) remember(s StoreResult, full bool) {
	if c.procs == nil {
		c.procs = make(map[int]Process)
		c.refs = make(map[int]int)
	}
	if old, ok := c.stored(s.Target.Path); ok && full && quietSame(old, &s) {
		// A store nobody holds, read or reused as before: the result and
		// what it teaches are those already kept (learnGeneration
		// would re-learn the same current inodes and drop nothing).
		return
	}
	// Results are handed to callers; keep copies they cannot change.
	// (Current is shared: a scan's reads are never written after it.)
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
	// Keep metadata only for pids some store still lists: count the new
	// holders before dropping the old ones, so a pid in both stays.
	for _, pid := range holderPids(s.Holders) {
		c.refs[pid]++
	}
	if old, ok := c.stored(s.Target.Path); ok {
		c.unref(old.Holders)
	}
	s.full = full
	c.view.Store(s.Target.Path, &s)
	c.learnGeneration(s, full)
}

// quietSame reports whether a full scan's result s for a store is the
// one already kept (old, from a full scan too: no holders then nor now),
// so remembering it changes nothing.
func quietSame(old, s *StoreResult) bool {
	if len(old.Holders) != 0 || len(s.Holders) != 0 || len(old.Blind) != 0 || len(s.Blind) != 0 ||
		old.Verdict != s.Verdict || old.Rule != s.Rule || old.RuleNote != s.RuleNote || !old.full ||
		old.Uninspected.Count != s.Uninspected.Count || old.Uninspected.Summary != s.Uninspected.Summary ||
		!slices.Equal(old.Uninspected.UIDs, s.Uninspected.UIDs) || !slices.Equal(old.Uninspected.Pids, s.Uninspected.Pids) ||
		old.births != s.births {
		return false
	}
	return old.Current == s.Current || (old.Current != nil && s.Current != nil && *old.Current == *s.Current)
}

// unref drops one store's reference to each of its holders' pids, and
// the metadata of pids no store lists any more.
func (c *Cache) unref(hs []Process) {
	for _, pid := range holderPids(hs) {
		if c.refs[pid]--; c.refs[pid] <= 0 {
			delete(c.refs, pid)
			delete(c.procs, pid)
		}
	}
}

// holderPids lists each holder's pid once.
func holderPids(hs []Process) []int {
	pids := make([]int, 0, len(hs))
	for _, p := range hs {
		if !slices.Contains(pids, p.Pid) {
			pids = append(pids, p.Pid)
		}
	}
	return pids
}
