package supervisor

import (
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// The agent runs with SQLite's OFD locking, as agentd's main switches it
// before its first SQLite open.
func TestMain(m *testing.M) { hermestest.RunWithOFDLocks(m) }
