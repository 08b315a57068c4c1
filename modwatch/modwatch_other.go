//go:build !linux

package modwatch

import "github.com/stateguard/stateguard/fileid"

// Watcher is a no-op where fanotify does not exist; New never returns one.
type Watcher struct{}

// New returns ErrUnsupported: only Linux has fanotify.
func New(func(Event), Config) (*Watcher, error) { return nil, ErrUnsupported }

// Attributed is false: no writer pids.
func (*Watcher) Attributed() bool { return false }

// Gated is false: no opens are held.
func (*Watcher) Gated() bool { return false }

// Watch does nothing.
func (*Watcher) Watch(string) (fileid.ID, error) { return fileid.ID{}, ErrUnsupported }

// Unwatch does nothing.
func (*Watcher) Unwatch(fileid.ID) {}

// Close does nothing.
func (*Watcher) Close() error { return nil }
