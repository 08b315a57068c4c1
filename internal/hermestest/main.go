package hermestest

import (
	"errors"
	"os"
	"testing"

	"modernc.org/sqlite"
)

// RunWithOFDLocks is a TestMain for packages whose tests run the agent in
// process: it switches SQLite to OFD locks before the first SQLite open,
// as agentd's and agentctl's mains do (store.UseOFDLocks), then runs the
// tests and removes what they built, as Main does. Where OFD locks do
// not exist SQLite keeps POSIX locks.
func RunWithOFDLocks(m *testing.M) {
	if _, err := sqlite.OFDLocking(true); err != nil && !errors.Is(err, sqlite.ErrOFDLockingUnavailable) {
		panic(err)
	}
	os.Exit(runAndRemoveBuilt(m))
}
