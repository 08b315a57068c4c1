package watcher

import (
	"strings"
	"time"
)

// EventKind says what an Event is about.
type EventKind uint8

const (
	// StoreChanged: a watched name of a target was created, removed,
	// renamed or chmodded, or the target's directory went away or came
	// back. Writes are never reported: -wal is written on every commit.
	StoreChanged EventKind = iota + 1
	// HomeChanged: something changed in a home that can add or remove a
	// store: a profile directory or a tombstone appeared or went away,
	// state.db appeared in the home, or one of the home's directories
	// itself was removed or came back.
	HomeChanged
	// Reconcile asks for a holder re-scan; Reason says why. For any
	// reason but the ticker's the consumer re-reads every store: it
	// covers every event the watcher could not deliver individually.
	Reconcile
	// WatchError: a directory exists but could not be watched (permission,
	// inotify watch limit). Changes in it are only seen by reconciles
	// until it can be; the watcher retries on every reconcile.
	WatchError
)

func (k EventKind) String() string {
	switch k {
	case StoreChanged:
		return "store_changed"
	case HomeChanged:
		return "home_changed"
	case Reconcile:
		return "reconcile"
	case WatchError:
		return "watch_error"
	}
	return "unknown"
}

// Op is the set of operations coalesced into an Event.
type Op uint8

const (
	Create Op = 1 << iota
	Remove
	Rename
	Chmod
	// Dir: the operation happened to a watched directory itself (removed,
	// renamed away, or back and re-armed), not to a file in it.
	Dir
)

func (o Op) Has(x Op) bool { return o&x != 0 }

func (o Op) String() string {
	if o == 0 {
		return "none"
	}
	var b strings.Builder
	for _, n := range []struct {
		op   Op
		name string
	}{{Create, "create"}, {Remove, "remove"}, {Rename, "rename"}, {Chmod, "chmod"}, {Dir, "dir"}} {
		if o.Has(n.op) {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(n.name)
		}
	}
	return b.String()
}

// Reasons carried by Reconcile events.
const (
	ReasonTick       = "tick"      // the reconcile ticker
	ReasonRequested  = "requested" // Watcher.Reconcile was called
	ReasonOverflow   = "kernel queue overflow"
	ReasonWatchError = "watch error"       // fsnotify reported an error
	ReasonBufferFull = "event buffer full" // the consumer fell behind; events were folded into this one
)

// Event is one typed, debounced change.
type Event struct {
	Kind EventKind
	// Key is the Target's key (StoreChanged).
	Key string
	// Home is the Home's root (HomeChanged).
	Home string
	// Names are the base names that changed, sorted, without duplicates:
	// "state.db-wal" for a store, "work" or ".deleted" for a home.
	Names []string
	Ops   Op
	// Path is the directory of a WatchError.
	Path string
	// Reason says why a Reconcile was asked for.
	Reason string
	Err    error
	// At is when the first raw event folded into this one was read.
	At time.Time
	// Count is how many raw events (or reconcile requests) were folded in.
	Count int
}
