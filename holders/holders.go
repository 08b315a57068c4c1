package holders

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stateguard/stateguard/fileid"
)

// Role is which of a store's three files an inode plays.
type Role string

const (
	RoleMain Role = "main"
	RoleWAL  Role = "wal"
	RoleSHM  Role = "shm"
)

// Roles lists the roles in the order results report them.
var Roles = []Role{RoleMain, RoleWAL, RoleSHM}

// Suffix is what the role appends to the store's path.
func (r Role) Suffix() string {
	switch r {
	case RoleWAL:
		return "-wal"
	case RoleSHM:
		return "-shm"
	}
	return ""
}

// Target is one store to look for: the absolute path of its main file. The
// roles live at Path, Path+"-wal" and Path+"-shm".
type Target struct {
	Path string
	// Dir is what discovery recorded about the store's directory (its
	// inode and owner); zero when there is no record. The store's files
	// are read through that directory opened without following a
	// symlink in any component, and refused unless it is still Dir.
	Dir DirRecord
}

// DirRecord is a directory's identity and owner as discovery recorded them
// (store.DirID, without the store package, which holders' non-Unix build
// does not have).
type DirRecord struct {
	ID  fileid.ID
	UID int
}

// RolePath is where role r of t lives.
func (t Target) RolePath(r Role) string { return t.Path + r.Suffix() }

// Evidence is how the scan learned that a process holds an inode.
type Evidence string

const (
	EvidenceFD   Evidence = "fd"   // an open fd on the inode
	EvidenceMap  Evidence = "map"  // a mapping of the inode
	EvidenceLock Evidence = "lock" // a lock the process holds on the inode (/proc/locks)
)

// Access says whether a holder can write a store's generation.
type Access string

const (
	// AccessWrite: an fd open for writing on main or -wal, or a shared
	// writable mapping of -shm (or of main or -wal).
	AccessWrite Access = "write"
	// AccessRead: every fd and mapping seen is read-only (a -shm fd open
	// for writing but not mapped writable does not count).
	AccessRead Access = "read"
	// AccessUnknown: known from lock evidence only; the process could not
	// be inspected. Treat it as a possible writer.
	AccessUnknown Access = "unknown"
)

// Match says how a held inode was tied to its role.
type Match string

const (
	// MatchInode: the inode is at the role's path now, or is one the scan
	// was told (or remembers) an earlier generation had.
	MatchInode Match = "inode"
	// MatchName: an inode the scan never saw, opened under the role's
	// name in the store's directory (an unlinked sidecar).
	MatchName Match = "name"
	// MatchSQLite: a SQLite main file (its header, and the process's
	// POSIX lock on the SHARED range) that a process holding the store's
	// -wal or -shm has open instead of the store's main: the main renamed
	// aside under a live connection.
	MatchSQLite Match = "sqlite"
)

// Held is one inode of a store that a process holds.
type Held struct {
	Role Role `json:"role"`
	// Path is the holder's view, " (deleted)" stripped: in another mount
	// namespace the path it opened; "" when known from a lock only.
	Path string `json:"path"`
	// HostPath is where the agent's mount namespace sees the inode (the
	// path at scan time); "" when it cannot be told.
	HostPath string    `json:"host_path"`
	FD       int       `json:"fd"` // lowest fd on the inode; -1 when only mapped or locked
	Mapped   bool      `json:"mapped"`
	ID       fileid.ID `json:"id"`
	Nlink    uint64    `json:"nlink"`
	Current  bool      `json:"current"` // ID is what is at the role's path now
	Match    Match     `json:"match"`
	// Evidence lists what showed the hold: fd, map, lock.
	Evidence []Evidence `json:"evidence"`
	// FDWrite: an fd on the inode is open for writing (O_WRONLY/O_RDWR in
	// /proc/<pid>/fdinfo), or the process holds a write lock on it.
	FDWrite bool `json:"fd_write"`
	// MapWrite: a shared writable mapping (rw-s) of the inode.
	MapWrite bool `json:"map_write"`
	// Access sums up this inode: write, read, or unknown (lock only).
	Access Access `json:"access"`
	// Birth is the inode's birth time (statx btime, ns) where known: what
	// lets a later scan (or agent, from the journal) tell it from an
	// unrelated file that got its number once it is freed.
	Birth int64 `json:"birth,omitempty"`
	// Owner is the inode's owner (st_uid), -1 when not known (a lock or
	// a mapping that could not be stat'ed).
	Owner int `json:"owner"`
	// Foreign says why this inode is not the store's own (foreign.go);
	// set only on the files in Process.ForeignFiles.
	Foreign string `json:"foreign,omitempty"`
}

func (h *Held) has(e Evidence) bool { return slices.Contains(h.Evidence, e) }

// canWrite applies the rule to one inode: a writable fd on main or -wal,
// or a writable shared mapping of any role.
func (h *Held) canWrite() bool {
	return h.MapWrite || (h.FDWrite && h.Role != RoleSHM)
}

// Process is one holder of a store, with the files of that store it holds.
type Process struct {
	Pid int `json:"pid"`
	// StartTicks is the start time in clock ticks since boot (Linux
	// /proc/<pid>/stat field 22) or in microseconds since the epoch
	// (macOS). With Pid it names one process for Signal.
	StartTicks uint64    `json:"start_ticks"`
	StartTime  time.Time `json:"start_time"`
	UID        int       `json:"uid"` // real uid, as ps shows it
	User       string    `json:"user"`
	Exe        string    `json:"exe"`
	Cmdline    []string  `json:"cmdline"`
	Files      []Held    `json:"files"`
	// Access is whether the process can write the store's generation
	// (see Held.canWrite): write, read or unknown.
	Access Access `json:"access"`
	// Inspected is false for a holder known from lock evidence only: its
	// fds and mappings could not be read, so it cannot be pinned through
	// /proc/<pid>/fd and its Access is unknown unless a write lock shows.
	Inspected bool `json:"inspected"`
	// ForeignMountNS: the process is in another mount namespace than the
	// scan (a container); Held.Path is its view, Held.HostPath ours.
	ForeignMountNS bool `json:"foreign_mount_ns,omitempty"`
	// NSPid is its pid inside its own pid namespace, when that differs
	// from Pid (which is always the scan's, the host's, pid).
	NSPid int `json:"ns_pid,omitempty"`
	// ForeignFiles are inodes it holds that sit (or sat) at the store's
	// paths but are not the store's own (foreign.go): never counted in
	// Files, so nothing is frozen, pinned or captured for them.
	ForeignFiles []Held `json:"foreign_files,omitempty"`
	// Foreign says why the agent must never signal it (another user's
	// process holding none of SQLite's locks on the store); "" when it
	// may be.
	Foreign string `json:"foreign,omitempty"`
}

// MaySignal reports whether the agent may stop or end p for the store:
// it is the store's owner's, or it holds SQLite's locks on the store.
func (p *Process) MaySignal() bool { return p.Foreign == "" }

// MayWrite reports whether p must be treated as able to write the
// generation: Access is write or unknown.
func (p *Process) MayWrite() bool { return p.Access != AccessRead }

// access applies the rule over p's files.
func (p *Process) access() Access {
	a := AccessRead
	for i := range p.Files {
		switch {
		case p.Files[i].canWrite():
			return AccessWrite
		case p.Files[i].Access == AccessUnknown:
			a = AccessUnknown
		}
	}
	return a
}

// Orphan reports whether p holds any inode that is no longer at its path.
func (p *Process) Orphan() bool {
	for _, f := range p.Files {
		if !f.Current {
			return true
		}
	}
	return false
}

// Ref names p for the signal functions.
func (p *Process) Ref() ProcRef { return ProcRef{Pid: p.Pid, StartTicks: p.StartTicks} }

// ProcRef names one process: a pid and its start time, so a recycled pid is
// never mistaken for the process that was scanned.
type ProcRef struct {
	Pid        int    `json:"pid"`
	StartTicks uint64 `json:"start_ticks"`
}

// ErrProcessGone is returned when a ProcRef's process has exited or its
// pid now names another process.
var ErrProcessGone = errors.New("process gone")

// Verdict sums up a store's scan.
type Verdict string

const (
	// VerdictClear: every process that could hold the store was
	// inspected, or is cleared by the rule, and none holds any of its
	// inodes.
	VerdictClear Verdict = "clear"
	// VerdictHeld: at least one process holds an inode of the store.
	// Blind may still list processes that could not be inspected.
	VerdictHeld Verdict = "held"
	// VerdictUnknown: no holder was seen, but the scan could not see
	// everything, so the store must not be treated as clear.
	VerdictUnknown Verdict = "unknown"
)

// Rule is how a scan judges the processes it cannot inspect.
type Rule string

const (
	// RuleLocks (the default): a process of another user that cannot be
	// inspected and holds no lock on any inode of the store cannot be a
	// live SQLite connection in WAL mode (every such connection keeps a
	// read lock on the -shm DMS byte and on the main's SHARED range), so
	// it is summarized in Uninspected and does not make the verdict
	// unknown. Processes of the scan's own (non-root) user, and any lock
	// the scan cannot attribute, still do.
	RuleLocks Rule = "locks"
	// RuleStrict: every uninspectable process that could open the store
	// makes it unknown.
	RuleStrict Rule = "strict"
)

// ParseRule accepts "locks", "strict", or "" (the default, locks).
func ParseRule(s string) (Rule, error) {
	switch r := Rule(s); r {
	case "":
		return RuleLocks, nil
	case RuleLocks, RuleStrict:
		return r, nil
	}
	return "", fmt.Errorf("verdict rule %q: want \"locks\" or \"strict\"", s)
}

// UnmarshalText lets a config file name the rule.
func (r *Rule) UnmarshalText(b []byte) error {
	v, err := ParseRule(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

func (r Rule) orDefault() Rule {
	if r == "" {
		return RuleLocks
	}
	return r
}

// BlindScope says why an uninspectable process counts.
type BlindScope string

const (
	// ScopeOtherUser: a process of another user (or, for a root scan, one
	// root may not inspect). The locks rule clears it when it holds no
	// lock on the store.
	ScopeOtherUser BlindScope = "other_user"
	// ScopeOwnUser: a process of the scan's own non-root user that it
	// still cannot inspect (not dumpable, hidepid): it counts under every
	// rule.
	ScopeOwnUser BlindScope = "own_user"
	// ScopeScan: not one process but a gap in the scan itself (a store
	// that cannot be stat'ed, an OS without a scan, a lock nobody
	// inspected owns): it counts under every rule.
	ScopeScan BlindScope = "scan"
)

// Blind is a process the scan could not inspect. Pid 0 stands for
// processes the scan could not even enumerate (hidepid, an unsupported OS,
// a partial scan).
type Blind struct {
	Pid    int        `json:"pid"`
	UID    int        `json:"uid"` // -1 when not known
	Reason string     `json:"reason"`
	Scope  BlindScope `json:"scope"`
}

// Uninspected summarizes the processes that could open a store and were
// not inspected, but that the locks rule cleared: none of them holds a
// lock on any inode of the store.
type Uninspected struct {
	Count int   `json:"count"`
	UIDs  []int `json:"uids"`
	Pids  []int `json:"pids"`
	// Summary is the one line to show, e.g. "3 processes of other users
	// not inspected; none holds a lock on this store".
	Summary string `json:"summary"`
}

// KnownFile is an inode of an earlier generation of a store that a scan
// should look for: a process holding it (by fd, mapping or lock, under any
// name, in any namespace) is an orphan holder of Role. Callers supply what
// they know beyond the scan (the guard's and pins' inodes, a journaled
// generation after a restart); a Cache adds every inode it has seen.
type KnownFile struct {
	Store string    `json:"store"` // the Target's Path
	Role  Role      `json:"role"`
	ID    fileid.ID `json:"id"`
	Path  string    `json:"path,omitempty"` // where the host last saw it
	// Birth is its birth time (statx btime, ns since the epoch) when
	// known: an inode number freed and reused for another file is then
	// never taken for it.
	Birth int64 `json:"birth,omitempty"`
	// Pinned: the caller holds an open fd on the inode until it calls
	// ForgetFiles, so the number cannot be freed and reused meanwhile.
	// A remembered inode neither pinned nor with a Birth is never looked
	// for: nothing could tell the file from an unrelated one that got
	// the number, and a holder found by it could be frozen or killed.
	Pinned bool `json:"-"`
}

// Options tune a scan. The zero value scans with RuleLocks.
type Options struct {
	Rule  Rule
	Known []KnownFile
	// Kept reports the files a process holds on the agent's behalf: the
	// service manager's copies of the agent's pins (FDSTORE=1). They are
	// no holding of that process, as the agent's own fds are none.
	Kept func(pid int, id fileid.ID) bool
	// reuse are earlier reads of targets' paths that the caller vouches
	// are still true (Cache.ScanReusing), by index in the targets (nil
	// entries, or a nil slice: read).
	reuse []*pathStat
	// last are the last reads of the targets' paths, by index, so a read
	// that finds the same keeps the same pathStat (and prev stays
	// reusable).
	last []*pathStat
	// prev is the last full scan's index, reused when built from the
	// same inputs (watchFor); prevRes the result built on it, whose
	// quiet stores' results a scan that finds them quiet again reuses
	// (collector.result).
	prev    *watch
	prevRes *Result
}

// StoreResult is the scan of one store.
type StoreResult struct {
	Target Target `json:"target"`
	// Current is what is at each role's path; shared with the Cache and
	// later scans, so never to be written.
	Current *Files    `json:"current"`
	Holders []Process `json:"holders"`
	// Blind lists the uninspectable processes (and scan gaps) that could
	// hold this store's files and that the rule does not clear: any entry
	// keeps the verdict from being clear.
	Blind []Blind `json:"blind"`
	// Uninspected are the processes the rule cleared (RuleLocks only).
	Uninspected Uninspected `json:"uninspected"`
	Rule        Rule        `json:"rule"`
	// RuleNote says why RuleLocks could not clear the processes in Blind
	// of other users (an unattributed lock, no lock table), if so.
	RuleNote string  `json:"rule_note,omitempty"`
	Verdict  Verdict `json:"verdict"`

	births [3]int64 // of the current files by index in Roles, for the Cache
	full   bool     // kept by the Cache from a full scan
}

// Orphans returns the holders that hold an inode no longer at its path.
func (s *StoreResult) Orphans() []Process {
	var out []Process
	for i := range s.Holders {
		if s.Holders[i].Orphan() {
			out = append(out, s.Holders[i])
		}
	}
	return out
}

// Result is one scan of a set of stores.
type Result struct {
	Stores []StoreResult `json:"stores"`
	Took   time.Duration `json:"took"`
	// Stated counts the stores whose paths this scan read; the others'
	// were reused from an earlier scan (Cache.ScanReusing).
	Stated int `json:"stated"`
	// stats are what was read or reused at each store's paths, by index
	// in Stores, for the Cache to reuse; w is the scan's index.
	stats []*pathStat
	w     *watch
	// index maps a store's path to its place in Stores, built with the
	// scan's result: every store's worker looks its own up, and a linear
	// search made that quadratic in the number of stores.
	index map[string]int
	// quiet marks, by index, the stores with no holder and no
	// unexplained lock in this scan; reused the stores whose result is
	// the previous scan's (collector.result); blindKey and locksOK are
	// the inputs every store's result shares, to tell whether the next
	// scan may reuse them.
	quiet, reused []bool
	allReused     bool // every store's is: reused is nil
	blindKey      []Blind
	locksOK       bool
}

// Reused reports whether store i's result is the one the previous full
// scan of the Cache gave (nothing at its paths or holding it changed), so
// a caller that acted on that result has nothing new to do for it.
func (r *Result) Reused(i int) bool {
	return (r.allReused && i < len(r.Stores)) || (i < len(r.reused) && r.reused[i])
}

// Store returns the result for the store at path, or nil.
func (r *Result) Store(path string) *StoreResult {
	if r.index != nil {
		i, ok := r.index[path]
		if !ok {
			return nil
		}
		if i < len(r.Stores) && r.Stores[i].Target.Path == path {
			return &r.Stores[i]
		}
	}
	for i := range r.Stores {
		if r.Stores[i].Target.Path == path {
			return &r.Stores[i]
		}
	}
	return nil
}
