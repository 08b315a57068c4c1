//go:build !linux

package store

// needImpersonation: macOS has no per-thread setfsuid that Go can use
// safely (pthread_setugid_np is deprecated and process-wide in effect for
// some calls), so there the directory checks are the only defence; a
// per-user launchd agent runs as the user anyway.
func needImpersonation(int) bool { return false }

func asOwner(_, _ int, fn func() error) error { return fn() }
