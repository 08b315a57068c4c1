package supervisor

import (
	"os"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// The agent runs with SQLite's OFD locking, as agentd's main switches it
// before its first SQLite open. The test binary doubles as the foreign
// writer of the rewrite benchmark (bench_rewrite_test.go).
func TestMain(m *testing.M) {
	if path := os.Getenv(foreignWriterEnv); path != "" {
		os.Exit(foreignWriterMain(path))
	}
	hermestest.RunWithOFDLocks(m)
}
