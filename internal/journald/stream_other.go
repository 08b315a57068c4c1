//go:build !linux

package journald

import "os"

// IsJournalStream: journald runs on Linux only.
func IsJournalStream(string, *os.File) (bool, error) { return false, nil }
