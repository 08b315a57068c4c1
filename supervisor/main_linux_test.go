//go:build linux

package supervisor

import (
	"os"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// The agent runs with SQLite's OFD locking, as agentd's main switches it
// before its first SQLite open. The test binary doubles as the foreign
// writer of the rewrite benchmark (bench_rewrite_test.go) and the forking
// restore tool of rewrite_toolstart_linux_test.go, and the service
// manager keeping the agent's pins of pinkeep_linux_test.go.
func TestMain(m *testing.M) {
	if path := os.Getenv(foreignWriterEnv); path != "" {
		os.Exit(foreignWriterMain(path))
	}
	if db := os.Getenv(forkedWriterEnv); db != "" {
		os.Exit(forkedWriterMain(db))
	}
	if db := os.Getenv(forkingToolEnv); db != "" {
		os.Exit(forkingToolMain(db))
	}
	if os.Getenv(holdFDEnv) != "" {
		os.Exit(holdFDMain())
	}
	if sock := os.Getenv(fdStoreEnv); sock != "" {
		os.Exit(fdStoreMain(sock))
	}
	hermestest.RunWithOFDLocks(m)
}
