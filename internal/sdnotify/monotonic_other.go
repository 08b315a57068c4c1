//go:build !linux

package sdnotify

// monotonicUsec: only systemd reads MONOTONIC_USEC, and systemd is Linux.
func monotonicUsec() int64 { return 0 }
