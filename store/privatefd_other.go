//go:build !linux

package store

// InPrivateFDTable runs f. Only Linux has per-thread file tables; the
// callers' reads are rare there and their closes the process's own.
func InPrivateFDTable(f func()) error {
	f()
	return nil
}
