package holders

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
)

// Cache remembers the holders found by the last scans so that, when a
// store's generation changes, its known holders can be re-inspected (and
// frozen) in well under a millisecond, before a full scan could finish.
// The zero value is ready to use and it is safe for concurrent use.
type Cache struct {
	mu     sync.Mutex
	last   *Result
	stores map[string]StoreResult
	procs  map[int]Process // metadata by pid, reused while StartTicks match
}

// Scan runs a full host scan and remembers its result.
func (c *Cache) Scan(targets []Target) (*Result, error) {
	res, err := scanAll(targets, c.known())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = res
	for _, s := range res.Stores {
		c.remember(s)
	}
	return res, nil
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
// (for example a process a caller knows just opened the store). It sees no
// other process, so its verdict is never Clear: with no holder left it is
// Unknown until the next full scan. Blind processes of the last full scan
// are carried over.
func (c *Cache) Targeted(t Target, pids ...int) (*StoreResult, error) {
	t.Path = filepath.Clean(t.Path)
	c.mu.Lock()
	prev, seen := c.stores[t.Path]
	known := c.knownLocked()
	c.mu.Unlock()

	want := slices.Clone(pids)
	for _, p := range prev.Holders {
		want = append(want, p.Pid)
	}
	slices.Sort(want)
	want = slices.Compact(want)

	res, err := scanPids([]Target{t}, want, known)
	if err != nil {
		return nil, err
	}
	s := res.Stores[0]
	s.Blind = append(s.Blind, prev.Blind...)
	if !seen {
		s.Blind = append(s.Blind, Blind{UID: -1, Reason: "targeted scan before any full scan of this store: only the given pids were inspected"})
	}
	if len(s.Holders) == 0 {
		s.Blind = append(s.Blind, Blind{UID: -1, Reason: fmt.Sprintf("targeted scan inspected only %d known pids; a full scan decides clear", len(want))})
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
		p.Files = nil
		p.Cmdline = slices.Clone(p.Cmdline)
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
}

func (c *Cache) known() map[int]Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.knownLocked()
}

func (c *Cache) knownLocked() map[int]Process {
	return maps.Clone(c.procs)
}
