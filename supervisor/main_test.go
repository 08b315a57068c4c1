package supervisor

import (
	"os"
	"testing"

	"github.com/stateguard/stateguard/store"
)

// The agent runs with SQLite's OFD locking (store.UseOFDLocks in agentd's main); the
// test process must switch before its first SQLite open, as agentd does.
func TestMain(m *testing.M) {
	if err := store.UseOFDLocks(); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}
