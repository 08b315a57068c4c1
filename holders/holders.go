package holders

import (
	"errors"
	"fmt"
	"io/fs"
	"time"
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

// FileID is the identity of one file. Dev uses the encoding of stat(2)'s
// st_dev on the running OS (unix.Mkdev on Linux), so identities from stat,
// /proc/<pid>/maps and libproc compare equal.
type FileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

func (id FileID) String() string { return fmt.Sprintf("%d:%d", id.Dev, id.Ino) }

// IsZero reports whether id is unset.
func (id FileID) IsZero() bool { return id == FileID{} }

// Target is one store to look for: the absolute path of its main file. The
// roles live at Path, Path+"-wal" and Path+"-shm".
type Target struct {
	Path string
}

// RolePath is where role r of t lives.
func (t Target) RolePath(r Role) string { return t.Path + r.Suffix() }

// FileState is what is at one role's path at scan time (lstat, never
// followed).
type FileState struct {
	Exists bool        `json:"exists"`
	ID     FileID      `json:"id"`
	Nlink  uint64      `json:"nlink"`
	Mode   fs.FileMode `json:"mode"`
	UID    int         `json:"uid"`
	GID    int         `json:"gid"`
}

// Held is one inode of a store that a process holds.
type Held struct {
	Role    Role   `json:"role"`
	Path    string `json:"path"` // the holder's view, " (deleted)" stripped
	FD      int    `json:"fd"`   // lowest fd on the inode; -1 when only mapped
	Mapped  bool   `json:"mapped"`
	ID      FileID `json:"id"`
	Nlink   uint64 `json:"nlink"`
	Current bool   `json:"current"` // ID is what is at the role's path now
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

// ErrIdentityChanged is returned by Pin when the fd no longer refers to the
// inode the caller expected.
var ErrIdentityChanged = errors.New("file identity changed")

// Verdict sums up a store's scan.
type Verdict string

const (
	// VerdictClear: every process that could open the store was
	// inspected and none holds any of its inodes.
	VerdictClear Verdict = "clear"
	// VerdictHeld: at least one process holds an inode of the store.
	// Blind may still list processes that could not be inspected.
	VerdictHeld Verdict = "held"
	// VerdictUnknown: no holder was seen, but the scan could not see
	// everything, so the store must not be treated as clear.
	VerdictUnknown Verdict = "unknown"
)

// Blind is a process the scan could not inspect. Pid 0 stands for
// processes the scan could not even enumerate (hidepid, an unsupported OS,
// a partial scan).
type Blind struct {
	Pid    int    `json:"pid"`
	UID    int    `json:"uid"` // -1 when not known
	Reason string `json:"reason"`
}

// StoreResult is the scan of one store.
type StoreResult struct {
	Target  Target             `json:"target"`
	Current map[Role]FileState `json:"current"`
	Holders []Process          `json:"holders"`
	// Blind lists only the uninspectable processes that could open this
	// store's files.
	Blind   []Blind `json:"blind"`
	Verdict Verdict `json:"verdict"`
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
}

// Store returns the result for the store at path, or nil.
func (r *Result) Store(path string) *StoreResult {
	for i := range r.Stores {
		if r.Stores[i].Target.Path == path {
			return &r.Stores[i]
		}
	}
	return nil
}
