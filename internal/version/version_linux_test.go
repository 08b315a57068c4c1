package version

import (
	"context"
	"errors"
	"testing"

	"modernc.org/sqlite"
)

// TestReadLeavesOFDLockingSwitchable: agentd may ask the version (for the
// build_info gauge) before it switches SQLite to OFD locks, which must
// happen before the process's first file lock. Read's in-memory database
// takes none.
func TestReadLeavesOFDLockingSwitchable(t *testing.T) {
	if _, err := Read(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.OFDLocking(true); errors.Is(err, sqlite.ErrOFDLockingTooLate) {
		t.Fatalf("after Read: %v", err)
	}
}
