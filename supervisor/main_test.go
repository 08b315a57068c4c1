package supervisor

import (
	"os"
	"testing"

	"modernc.org/sqlite"
)

// The agent runs with SQLite's OFD locking (see enableOFDLocking); the
// test process must switch before its first SQLite open, as agentd does.
func TestMain(m *testing.M) {
	if _, err := sqlite.OFDLocking(true); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}
