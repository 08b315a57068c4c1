package holders

import (
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"

	"github.com/stateguard/stateguard/fileid"
)

// blindProc is an uninspectable process; groups reports its groups when it
// can (only needed for files whose group bits matter).
type blindProc struct {
	Blind
	groups func() ([]int, bool)
}

// collector gathers one scan's findings.
type collector struct {
	w       *watch
	opts    Options
	euid    int
	holders [][]Process
	blind   []blindProc
	// inspected are the pids whose fds and mappings were read.
	inspected map[int]bool
	// fileLocks are the OFD and flock locks seen in the fdinfo of an
	// inspected fd on a watched inode, to account for /proc/locks lines
	// that carry no pid.
	fileLocks []fdLock
	// locks is the lock table; nil where the OS has none.
	locks *lockTable
	// unexplained says, per store, which locks on its inodes no
	// inspected process accounts for.
	unexplained map[int][]string
	// summary is the last summarize, of summarized (judge).
	summary    *Uninspected
	summarized []Blind
}

func newCollector(w *watch, opts Options, euid int) *collector {
	return &collector{w: w, opts: opts, euid: euid, holders: make([][]Process, len(w.targets)), inspected: map[int]bool{}}
}

// add records p as a holder of the stores in hs.
func (c *collector) add(p Process, hs []holding) {
	for i := range c.w.targets {
		var files []Held
		for _, h := range hs {
			if h.store == i && (c.opts.Kept == nil || !c.opts.Kept(p.Pid, h.held.ID)) {
				files = append(files, h.held)
			}
		}
		if len(files) == 0 {
			continue
		}
		sort.SliceStable(files, func(a, b int) bool { return roleIndex(files[a].Role) < roleIndex(files[b].Role) })
		q := p
		q.Cmdline = slices.Clone(p.Cmdline)
		q.Files, q.ForeignFiles = splitForeign(c.w.targets[i], files)
		q.Access = q.access()
		q.Foreign = foreignProcess(c.w.targets[i], &q)
		c.holders[i] = append(c.holders[i], q)
	}
}

func roleIndex(r Role) int { return slices.Index(Roles, r) }

// merge adds what another collector of the same watch found.
func (c *collector) merge(o *collector) {
	for i := range c.holders {
		c.holders[i] = append(c.holders[i], o.holders[i]...)
	}
	c.blind = append(c.blind, o.blind...)
	for pid := range o.inspected {
		c.inspected[pid] = true
	}
	c.fileLocks = append(c.fileLocks, o.fileLocks...)
}

// addUnexplained records a lock on store i that no holder accounts for.
func (c *collector) addUnexplained(i int, reason string) {
	if c.unexplained == nil {
		c.unexplained = map[int][]string{}
	}
	c.unexplained[i] = append(c.unexplained[i], reason)
}

func (c *collector) addBlind(b Blind, groups func() ([]int, bool)) {
	if b.Scope == "" {
		b.Scope = c.scope(b)
	}
	c.blind = append(c.blind, blindProc{Blind: b, groups: groups})
}

// scope classifies an uninspectable process: a root scan cannot inspect
// it because of limits beyond uid (capabilities, an LSM); a user's scan
// because it belongs to someone else, or, for its own uid, because it
// made itself undumpable or /proc hides it.
func (c *collector) scope(b Blind) BlindScope {
	switch {
	case b.Pid == 0 && b.UID < 0:
		return ScopeScan
	case b.UID < 0:
		return ScopeOwnUser // cannot tell: count it
	case c.euid != 0 && b.UID == c.euid:
		return ScopeOwnUser
	}
	return ScopeOtherUser
}

func (c *collector) result() *Result {
	res := &Result{stats: c.w.stats, Stated: c.w.stated, w: c.w,
		blindKey: c.blindKey(), locksOK: c.locks != nil && c.locks.err == nil}
	prev := c.reusable(res)
	// The watch's index says the same when no path is there twice, and
	// it is never written after the build: shared (no map per scan).
	shared := len(c.w.index) == len(c.w.targets)
	if shared && c.allReused(prev) {
		// An idle scan: every store's result is prev's, at the same
		// place. Results are never written once made: prev's stand, with
		// nothing allocated per store.
		res.Stores, res.quiet, res.index, res.allReused = prev.Stores, prev.quiet, c.w.index, true
		return res
	}
	res.Stores, res.quiet = make([]StoreResult, len(c.w.targets)), make([]bool, len(c.w.targets))
	if shared {
		res.index = c.w.index
	} else {
		res.index = make(map[string]int, len(c.w.targets))
	}
	for i, t := range c.w.targets {
		if !shared {
			res.index[t.Path] = i
		}
		res.quiet[i] = len(c.holders[i]) == 0 && len(c.unexplained[i]) == 0
		if k := prev.quietAt(i, t.Path, c.w.stats[i]); res.quiet[i] && k >= 0 {
			// Nothing this store's result is made of changed: the
			// same paths read (the same pathStat), nobody holding it,
			// the same uninspectable processes and lock table.
			if res.reused == nil {
				res.reused = make([]bool, len(c.w.targets))
			}
			res.Stores[i], res.reused[i] = prev.Stores[k], true
			continue
		}
		s := StoreResult{Target: t, Current: &c.w.stats[i].cur, Holders: c.holders[i], Rule: c.opts.Rule.orDefault()}
		for ri, r := range Roles {
			if st := s.Current.Of(r); st.Exists && ri < len(s.births) {
				if b, ok := c.w.birthOf(st.ID); ok {
					s.births[ri] = b
				}
			}
		}
		if len(s.Holders) > 1 {
			sort.Slice(s.Holders, func(a, b int) bool { return s.Holders[a].Pid < s.Holders[b].Pid })
		}
		if err := c.w.stats[i].err; err != nil {
			s.Blind = append(s.Blind, Blind{UID: -1, Scope: ScopeScan,
				Reason: fmt.Sprintf("cannot stat the store's files (%v): holders cannot be told current from orphan", err)})
		}
		var could []Blind
		for _, b := range c.blind {
			if !c.holdsAny(i, b.Pid) && couldOpen(b, c.w.stats[i].dir, s.Current) {
				could = append(could, b.Blind)
			}
		}
		c.judge(&s, could, c.unexplained[i])
		s.Verdict = verdict(&s)
		res.Stores[i] = s
	}
	return res
}

// reusable returns the previous full scan's result when res's stores may
// take their results from it (quietAt says which): every input shared by
// all stores is the same: the rule, the lock table's state, and the
// uninspectable processes, none of which has a uid whose groups
// couldOpen would have to ask again.
func (c *collector) reusable(res *Result) *Result {
	prev := c.opts.prevRes
	if prev == nil || len(prev.quiet) != len(prev.Stores) || len(prev.stats) != len(prev.Stores) ||
		prev.locksOK != res.locksOK || !slices.Equal(prev.blindKey, res.blindKey) {
		return nil
	}
	for _, b := range res.blindKey {
		if b.UID > 0 {
			return nil
		}
	}
	for i := range prev.Stores {
		if prev.Stores[i].Rule != c.opts.Rule.orDefault() {
			return nil
		}
	}
	return prev
}

// quietAt returns the index in r (a previous scan's result) of the store
// at path when r found it quiet after reading (or reusing) the same
// pathStat ps, so its result there is what a quiet store's is now; -1
// otherwise. i is its index now: the same when the targets are.
func (r *Result) quietAt(i int, path string, ps *pathStat) int {
	if r == nil || ps == nil {
		return -1
	}
	k := i
	if k >= len(r.Stores) || r.Stores[k].Target.Path != path {
		var ok bool
		if k, ok = r.index[path]; !ok || k >= len(r.Stores) || r.Stores[k].Target.Path != path {
			return -1
		}
	}
	if !r.quiet[k] || r.stats[k] != ps {
		return -1
	}
	return k
}

// allReused reports whether every store is quiet and its result is
// prev's at the same index (quietAt).
func (c *collector) allReused(prev *Result) bool {
	if prev == nil || len(prev.Stores) != len(c.w.targets) {
		return false
	}
	for i, t := range c.w.targets {
		if len(c.holders[i]) != 0 || len(c.unexplained[i]) != 0 || prev.quietAt(i, t.Path, c.w.stats[i]) != i {
			return false
		}
	}
	return true
}

// blindKey is the uninspectable processes in a stable order.
func (c *collector) blindKey() []Blind {
	k := make([]Blind, 0, len(c.blind))
	for _, b := range c.blind {
		k = append(k, b.Blind)
	}
	slices.SortFunc(k, func(x, y Blind) int {
		if x.Pid != y.Pid {
			return x.Pid - y.Pid
		}
		if x.UID != y.UID {
			return x.UID - y.UID
		}
		if x.Reason != y.Reason {
			return strings.Compare(x.Reason, y.Reason)
		}
		return strings.Compare(string(x.Scope), string(y.Scope))
	})
	return k
}

// holdsAny reports whether pid is already a holder of store i (found by
// lock evidence although it could not be inspected).
func (c *collector) holdsAny(i, pid int) bool {
	return pid > 0 && slices.ContainsFunc(c.holders[i], func(p Process) bool { return p.Pid == pid })
}

// judge applies the rule: under RuleLocks, processes of other users that
// hold no lock on the store are summarized instead of listed, unless a
// lock on it cannot be attributed (it may be one of theirs) or the lock
// table could not be read.
func (c *collector) judge(s *StoreResult, could []Blind, unexplained []string) {
	if s.Rule == RuleStrict {
		s.Blind = append(s.Blind, could...)
		return
	}
	var other, rest []Blind
	for _, b := range could {
		if b.Scope == ScopeOtherUser {
			other = append(other, b)
		} else {
			rest = append(rest, b)
		}
	}
	switch {
	case len(other) == 0:
	case c.locks == nil || c.locks.err != nil:
		s.RuleNote = "no lock table to clear the processes of other users by: they count as under the strict rule"
		if c.locks != nil {
			s.RuleNote = fmt.Sprintf("cannot read /proc/locks (%v): the processes of other users count as under the strict rule", c.locks.err)
		}
		rest = append(rest, other...)
	case len(unexplained) > 0:
		s.RuleNote = "a lock on this store belongs to no inspected process, so it may be one of the uninspected processes'"
		for _, u := range unexplained {
			rest = append(rest, Blind{UID: -1, Scope: ScopeScan, Reason: u})
		}
		rest = append(rest, other...)
	default:
		// Usually the same few processes for every store: one summary
		// for them all (its slices are read only), not one per store.
		if c.summary == nil || !slices.Equal(c.summarized, other) {
			u := summarize(other, c.euid)
			c.summary, c.summarized = &u, other
		}
		s.Uninspected = *c.summary
	}
	s.Blind = append(s.Blind, rest...)
}

func summarize(bs []Blind, euid int) Uninspected {
	u := Uninspected{Count: len(bs), UIDs: []int{}, Pids: []int{}}
	for _, b := range bs {
		if b.Pid > 0 {
			u.Pids = append(u.Pids, b.Pid)
		}
		if !slices.Contains(u.UIDs, b.UID) {
			u.UIDs = append(u.UIDs, b.UID)
		}
	}
	slices.Sort(u.Pids)
	slices.Sort(u.UIDs)
	procs := "processes"
	if u.Count == 1 {
		procs = "process"
	}
	if euid == 0 {
		u.Summary = fmt.Sprintf("%d %s not inspectable even by root; none holds a lock on this store", u.Count, procs)
	} else {
		u.Summary = fmt.Sprintf("%d %s of other users not inspected; none holds a lock on this store", u.Count, procs)
	}
	return u
}

func verdict(s *StoreResult) Verdict {
	switch {
	case len(s.Holders) > 0:
		return VerdictHeld
	case len(s.Blind) > 0:
		return VerdictUnknown
	}
	return VerdictClear
}

// couldOpen reports whether an uninspectable process might hold the
// store's files: whether its uid could open them now. When in doubt, yes.
func couldOpen(b blindProc, dir fileid.State, files *Files) bool {
	if b.UID <= 0 || !dir.Exists {
		return true
	}
	if !mayAccess(b, dir, 0o1) {
		return false
	}
	any := false
	for _, r := range Roles {
		st := files.Of(r)
		if !st.Exists {
			continue
		}
		any = true
		if mayAccess(b, st, 0o6) {
			return true
		}
	}
	// Nothing at the path to judge by: an orphan may be all there is.
	return !any
}

// mayAccess reports whether b's uid may get any of the permission bits
// (in the "other" position) on st, or owns it and so could chmod it.
func mayAccess(b blindProc, st fileid.State, bits fs.FileMode) bool {
	perm := st.Mode.Perm()
	if b.UID == st.UID || perm&bits != 0 {
		return true
	}
	if perm&(bits<<3) == 0 {
		return false
	}
	if b.groups == nil {
		return true
	}
	gids, ok := b.groups()
	return !ok || slices.Contains(gids, st.GID)
}

// Scan inspects every process on the host for inodes of targets, current
// or orphaned, and judges what it could not inspect by RuleLocks.
func Scan(targets []Target) (*Result, error) {
	return ScanWith(targets, Options{})
}

// ScanWith is Scan with options: the verdict rule, and the inodes of
// earlier generations to look for.
func ScanWith(targets []Target, o Options) (*Result, error) {
	return scanAll(targets, nil, o)
}
