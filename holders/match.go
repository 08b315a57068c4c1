package holders

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// deletedSuffix is what Linux appends to the link text of an unlinked
// file. A file may really be named so, so it is a hint only: identity
// decides whether an inode is current.
const deletedSuffix = " (deleted)"

// observation is one open file or mapping seen in a process, before it is
// matched against the stores.
type observation struct {
	path       string // the holder's view of the path, deletedSuffix stripped
	fd         int    // -1 for a mapping
	mapped     bool
	id         FileID
	nlink      uint64
	nlinkKnown bool
}

// holding is one Held of one store (index into watch.targets).
type holding struct {
	store int
	held  Held
}

// watch is the set of stores of one scan with what is at their paths now.
type watch struct {
	targets []Target
	current []map[Role]FileState
	dir     []FileState
	statErr []error
	base    []string
	// byDir maps every spelling of a store's directory as a process may
	// see it (as given, and with symlinks resolved, which is what the
	// kernel reports) to the stores in it.
	byDir map[string][]int
}

func newWatch(targets []Target) *watch {
	w := &watch{byDir: make(map[string][]int)}
	for _, t := range targets {
		t.Path = filepath.Clean(t.Path)
		i := len(w.targets)
		w.targets = append(w.targets, t)
		w.base = append(w.base, filepath.Base(t.Path))
		cur := make(map[Role]FileState, len(Roles))
		var statErr error
		for _, r := range Roles {
			st, err := lstatState(t.RolePath(r))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				statErr = errors.Join(statErr, err)
			}
			cur[r] = st
		}
		w.current = append(w.current, cur)
		dir := filepath.Dir(t.Path)
		dst, err := statState(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			statErr = errors.Join(statErr, err)
		}
		w.dir = append(w.dir, dst)
		w.statErr = append(w.statErr, statErr)
		w.addDir(dir, i)
		if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
			w.addDir(real, i)
		}
	}
	return w
}

func (w *watch) addDir(dir string, i int) {
	if !slices.Contains(w.byDir[dir], i) {
		w.byDir[dir] = append(w.byDir[dir], i)
	}
}

func lstatState(path string) (FileState, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return FileState{}, err
	}
	return fileState(fi), nil
}

func statState(path string) (FileState, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return FileState{}, err
	}
	return fileState(fi), nil
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
// directory. It is the filter applied before any stat.
func (w *watch) candidate(p []byte) bool {
	dir, _, ok := splitDir(p)
	if !ok {
		return false
	}
	_, ok = w.byDir[string(dir)]
	return ok
}

// match classifies obs against every store in the observed directory:
// by identity first (an inode at a role's path now is current, whatever
// name the holder knows it by), then by name (an inode that is not at the
// path but was opened under a role's name is an orphan of that role).
func (w *watch) match(obs []observation) []holding {
	var out []holding
	for _, o := range obs {
		dir, base, ok := splitDir([]byte(o.path))
		if !ok {
			continue
		}
		for _, i := range w.byDir[string(dir)] {
			h, ok := w.classify(i, string(base), o)
			if ok {
				out = mergeHolding(out, holding{store: i, held: h})
			}
		}
	}
	return out
}

func (w *watch) classify(i int, base string, o observation) (Held, bool) {
	h := Held{Path: o.path, FD: o.fd, Mapped: o.mapped, ID: o.id, Nlink: o.nlink}
	for _, r := range Roles {
		if st := w.current[i][r]; st.Exists && st.ID == o.id {
			h.Role, h.Current = r, true
			if !o.nlinkKnown {
				h.Nlink = st.Nlink
			}
			return h, true
		}
	}
	for _, r := range Roles {
		if base == w.base[i]+r.Suffix() {
			h.Role = r
			return h, true
		}
	}
	return Held{}, false
}

// mergeHolding adds h, folding an fd and a mapping of one inode into one
// Held that keeps the lowest fd.
func mergeHolding(hs []holding, h holding) []holding {
	for j := range hs {
		o := &hs[j]
		if o.store != h.store || o.held.ID != h.held.ID || o.held.Role != h.held.Role {
			continue
		}
		o.held.Mapped = o.held.Mapped || h.held.Mapped
		if h.held.FD >= 0 && (o.held.FD < 0 || h.held.FD < o.held.FD) {
			o.held.FD = h.held.FD
			o.held.Path = h.held.Path
		}
		return hs
	}
	return append(hs, h)
}

// blindProc is an uninspectable process; groups reports its groups when it
// can (only needed for files whose group bits matter).
type blindProc struct {
	Blind
	groups func() ([]int, bool)
}

// collector gathers one scan's findings.
type collector struct {
	w       *watch
	holders [][]Process
	blind   []blindProc
}

func newCollector(w *watch) *collector {
	return &collector{w: w, holders: make([][]Process, len(w.targets))}
}

// add records p as a holder of the stores in hs.
func (c *collector) add(p Process, hs []holding) {
	for i := range c.w.targets {
		var files []Held
		for _, h := range hs {
			if h.store == i {
				files = append(files, h.held)
			}
		}
		if len(files) == 0 {
			continue
		}
		sort.Slice(files, func(a, b int) bool { return roleIndex(files[a].Role) < roleIndex(files[b].Role) })
		q := p
		q.Cmdline = slices.Clone(p.Cmdline)
		q.Files = files
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
}

func (c *collector) addBlind(b Blind, groups func() ([]int, bool)) {
	c.blind = append(c.blind, blindProc{Blind: b, groups: groups})
}

func (c *collector) result() *Result {
	res := &Result{Stores: make([]StoreResult, len(c.w.targets))}
	for i, t := range c.w.targets {
		s := StoreResult{Target: t, Current: c.w.current[i], Holders: c.holders[i]}
		sort.Slice(s.Holders, func(a, b int) bool { return s.Holders[a].Pid < s.Holders[b].Pid })
		if err := c.w.statErr[i]; err != nil {
			s.Blind = append(s.Blind, Blind{UID: -1, Reason: fmt.Sprintf("cannot stat the store's files (%v): holders cannot be told current from orphan", err)})
		}
		for _, b := range c.blind {
			if couldOpen(b, c.w.dir[i], s.Current) {
				s.Blind = append(s.Blind, b.Blind)
			}
		}
		s.Verdict = verdict(&s)
		res.Stores[i] = s
	}
	return res
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
func couldOpen(b blindProc, dir FileState, files map[Role]FileState) bool {
	if b.UID <= 0 || !dir.Exists {
		return true
	}
	if !mayAccess(b, dir, 0o1) {
		return false
	}
	any := false
	for _, r := range Roles {
		st := files[r]
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
func mayAccess(b blindProc, st FileState, bits fs.FileMode) bool {
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
// or orphaned. A process that cannot be inspected makes a store Unknown
// only when its uid could open that store's files.
func Scan(targets []Target) (*Result, error) {
	return scanAll(targets, nil)
}
