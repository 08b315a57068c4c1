package modwatch

import (
	"errors"
	"log/slog"
	"time"

	"github.com/stateguard/stateguard/fileid"
)

// ErrUnsupported means this system gives no write notifications of a
// file (not Linux).
var ErrUnsupported = errors.New("write notifications of a file need Linux (fanotify, or inotify without CAP_SYS_ADMIN)")

// Config is how a Watcher runs; the zero value works.
type Config struct {
	Log *slog.Logger // nil: slog.Default()
	// NoGate: never hold opens (no permission group), even where the
	// kernel has permission events.
	NoGate bool
}

// Op is what a process did to a watched file.
type Op uint8

const (
	// Write: the process wrote into the file or changed its size
	// (truncate, O_TRUNC).
	Write Op = iota + 1
	// CloseWrite: the process closed a descriptor it had opened for
	// writing.
	CloseWrite
	// Overflow: the kernel's queue overflowed and events were lost; ID
	// and Pid are zero. The receiver must assume anything happened.
	Overflow
	// OpenWrite: the process is opening the file write-only or
	// truncating, as no SQLite connection does. Its open(2) waits until
	// the callback returns (at most GateTimeout), so what the callback
	// does happens before the process can write.
	OpenWrite
)

func (o Op) String() string {
	switch o {
	case Write:
		return "write"
	case CloseWrite:
		return "close-write"
	case Overflow:
		return "overflow"
	case OpenWrite:
		return "open-write"
	}
	return "unknown"
}

// Event is one notification. Several writes by one process that the
// kernel had not yet delivered may arrive as one.
type Event struct {
	Op  Op
	ID  fileid.ID // the inode written
	Pid int       // the writer's pid (thread group), in the agent's pid namespace; 0 when not Attributed
	At  time.Time // when the agent read it
}

// GateTimeout bounds how long an open for writing of a watched main is
// held (gate_linux.go): after it the open is allowed, whether or not the
// writers are frozen yet, and a rewrite.gate_timeout warning says so.
const GateTimeout = 200 * time.Millisecond

// EventGateTimeout is the stable "event" key of that warning.
const EventGateTimeout = "rewrite.gate_timeout"
