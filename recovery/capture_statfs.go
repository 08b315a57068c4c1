//go:build linux || darwin

package recovery

import "github.com/stateguard/stateguard/store"

// freeBytes is the space an unprivileged writer may still use on d's
// filesystem, or -1 when unknown.
func freeBytes(d capDir) int64 { return store.FreeBytes(d.fd) }
