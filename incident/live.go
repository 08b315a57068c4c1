package incident

import (
	"fmt"
	"os"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// live is the in-memory side of an unfinished incident: what the journal
// cannot hold (open fds) and what its steps need between two wakes. Its
// state is always the journal's; what it waits for is wait, one value.
type live struct {
	id     string
	kind   journal.Kind
	policy Policy
	state  journal.State
	prev   journal.State // the state needs_action was entered from
	wait   pending

	holders []holder
	pins    []*pin
	// snapshot is a sidecar_lost incident's copy of the shared main as it
	// was at detection; staging a mispaired incident's capture directory
	// holding its quarantined sidecars.
	snapshot, staging string
	// foreign, for a mispaired store nobody holds, names the sidecars to
	// quarantine (by suffix); quarantined says the quarantine ran.
	foreign     map[string]fileid.ID
	quarantined bool
	// rewriter, for a rewritten main, is the process writing it in place;
	// bystanders the old generation's connections that are not signalled.
	rewriter         *holders.ProcRef
	bystanders       []holders.ProcRef
	rewriteConfirmed bool
	// early is the capture taken while every holder was still stopped,
	// before release: if the agent dies during a terminate grace period
	// the orphan dies with its pins, but this capture survives.
	early capture
	// capDir is the capture the divert reads, once captured.
	capDir string
	// replay is the divert's files still to queue (nil after a restart:
	// the divert, which is idempotent, runs again).
	replay []recovery.DivertFile

	openedAt time.Time
	// needsSince is when it last entered needs_action (frozen_limit.go).
	needsSince time.Time
	// run is the step under way as journaled, and parked why its steps
	// are not run any more (park.go).
	run    *journal.StepRun
	parked string
	// replacedAt is when the generation changed at the path: a replaced
	// incident replays only rows committed after it.
	replacedAt time.Time
	// cut is the frame cut of a replaced or mispaired incident (cut.go);
	// cutWanted: the running agent saw the change, so a cut the detection
	// could not read is read at the pins.
	cut       *recovery.FrameCut
	cutSource string // guard, gate or pin: where the cut was read
	cutWanted bool
	// cutLate: the cut is read after the change (a rewritten main whose
	// writers were frozen only after the rewrite's first write): rows
	// stamped in replaceMargin before it may have been committed after
	// the change, and stay to replay.
	cutLate bool
	// diverting is the divert in flight, nil when none (step_divert.go).
	diverting *divertRun
	// marks is how far each Hermes session JSONL had been written when
	// the incident opened (see hermes.go).
	marks map[string]int64
}

// Wait names what a live incident waits for before its state's step can
// do more. The zero value waits for nothing.
type Wait string

const (
	WaitNone Wait = ""
	// WaitHold: the hold policy keeps the holders frozen until an
	// operator releases them (agentctl release).
	WaitHold Wait = "hold"
	// WaitRetry: a capture or divert failed (a full disk, a malformed
	// capture); it is tried again at until.
	WaitRetry Wait = "retry"
	// WaitGrace: terminate sent SIGTERM; holders still running at until
	// get SIGKILL.
	WaitGrace Wait = "grace"
	// WaitExit: the holders were released and have not exited yet.
	WaitExit Wait = "exit"
	// WaitJobs: replay jobs are queued or running.
	WaitJobs Wait = "jobs"
	// WaitRewriter: a rewritten main's rewriter still has it open for
	// writing; its writers stay frozen until it is done.
	WaitRewriter Wait = "rewriter"
	// WaitJoiners: a process that is no holder of the incident opened
	// the new main with the old generation's sidecars; the quarantine
	// waits for it to close them.
	WaitJoiners Wait = "joiners"
	// WaitDivert: the divert runs on a goroutine of its own, or waits for
	// another incident's divert of the store to end; that end wakes the
	// worker.
	WaitDivert Wait = "divert"
)

// pending is what an incident waits for: one value instead of a deadline
// field per condition.
type pending struct {
	why   Wait
	until time.Time // WaitRetry: not before; WaitGrace: the SIGKILL deadline
	tries int       // consecutive failures of the step being retried
}

// ready reports whether the state's step should run at now. Waits for an
// event (an exit, a job) run the step, which looks again cheaply; a hold
// never does.
func (p pending) ready(now time.Time) bool {
	switch p.why {
	case WaitHold:
		return false
	case WaitRetry:
		return !now.Before(p.until)
	}
	return true
}

type holder struct {
	ref    holders.ProcRef
	exe    string
	files  []holders.Held
	frozen bool // stopped by the agent (SIGSTOP outlives the agent)
	// readOnly: it cannot write the orphan (holders.Process.MayWrite is
	// false) or it is another user's process the agent may not signal
	// (foreign says why), so it is pinned and reported but never
	// signalled, and the incident does not wait for it to exit.
	readOnly bool
	foreign  string
}

// neverSignalled reports whether an orphan holder is one the incident
// pins and reports but never stops, ends or waits for.
func neverSignalled(p *holders.Process) bool { return !p.MayWrite() || !p.MaySignal() }

// foreignHolders lists the holders the agent may not signal because they
// are another user's, each with why, for the incident's event.
func foreignHolders(hs []holder) []string {
	out := []string{}
	for _, h := range hs {
		if h.foreign != "" {
			out = append(out, fmt.Sprintf("pid %d: %s", h.ref.Pid, h.foreign))
		}
	}
	return out
}

// pin is one of the agent's read-only fds on an orphaned inode. While it
// is open the inode's data outlives every other holder.
type pin struct {
	role  holders.Role
	id    fileid.ID
	f     *os.File
	birth int64 // statx btime of f, 0 when the filesystem keeps none
}

// known names the pinned inode for the holder cache: pinned, so the
// cache may look for it while f is open (the number cannot be reused).
func (p *pin) known(store string) holders.KnownFile {
	return holders.KnownFile{Store: store, Role: p.role, ID: p.id, Birth: p.birth, Pinned: true}
}

// capture is a capture directory and what the pinned files looked like
// when it was taken: enough to tell whether the orphan changed since.
type capture struct {
	dir    string
	stamps []fileStamp
	bytes  int64 // what removing it gives back (0: unknown)
}

type fileStamp struct {
	role        holders.Role
	size, mtime int64
}

func (li *live) holds(ref holders.ProcRef) bool {
	for _, h := range li.holders {
		if h.ref == ref {
			return true
		}
	}
	return false
}

// writers are the holders that may write the orphan: the only ones the
// incident signals or waits for.
func (li *live) writers() []holder {
	var out []holder
	for _, h := range li.holders {
		if !h.readOnly {
			out = append(out, h)
		}
	}
	return out
}

func (li *live) anyFrozen() bool {
	for _, h := range li.holders {
		if h.frozen {
			return true
		}
	}
	return false
}

func (li *live) pinOf(role holders.Role) *pin {
	for _, p := range li.pins {
		if p.role == role {
			return p
		}
	}
	return nil
}

// closePins closes the incident's pinned fds, those of the store at
// mainPath. The agent's SQLite connections take OFD locks on a main file,
// which no close here cancels, but POSIX locks on a -shm: a pinned -shm
// (the store's own when the files stayed in place) is closed with
// store.CloseSHM, which waits for those connections.
func (li *live) closePins(mainPath string) {
	for _, p := range li.pins {
		closeAs(mainPath, p.role, p.f)
	}
	li.pins = nil
}

// closeAs closes f, a file of the store at mainPath in role: a -shm with
// store.CloseSHM, which keeps the agent's own connections' locks.
func closeAs(mainPath string, role holders.Role, f *os.File) {
	if role == holders.RoleSHM {
		_ = store.CloseSHM(mainPath, f)
		return
	}
	_ = f.Close()
}

// stamps records the pinned orphan's files that a holder could still
// change: not the -shm (rebuilt from the WAL) and not a main file shared
// with the new generation.
func (li *live) stamps() []fileStamp {
	var out []fileStamp
	for _, p := range li.pins {
		if p.role == holders.RoleSHM || (p.role == holders.RoleMain && kindOf(li.kind).mainShared) {
			continue
		}
		fi, err := p.f.Stat()
		if err != nil {
			return nil
		}
		out = append(out, fileStamp{role: p.role, size: fi.Size(), mtime: fi.ModTime().UnixNano()})
	}
	return out
}

func sameStamps(a, b []fileStamp) bool {
	if len(a) == 0 || len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// readerPids lists the read-only holders, for the events that report them.
func readerPids(hs []holder) []int {
	out := []int{}
	for _, h := range hs {
		if h.readOnly {
			out = append(out, h.ref.Pid)
		}
	}
	return out
}

func holderPids(hs []holder) []int {
	out := make([]int, 0, len(hs))
	for _, h := range hs {
		out = append(out, h.ref.Pid)
	}
	return out
}
