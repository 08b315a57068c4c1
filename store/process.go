package store

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"modernc.org/sqlite"
)

// Process-wide SQLite settings. The binaries' mains apply them once,
// before anything opens a database; libraries never do.

// UseOFDLocks makes this process's SQLite locks on database files OFD
// locks, so no close() of another fd on a store (the guard, a pin, a
// header read) can drop them; Hermes' POSIX locks and these conflict as
// they must. It must run before the first SQLite open. Where OFD locks do
// not exist (macOS, old kernels) SQLite keeps POSIX locks, the code never
// closes a raw fd on a store it holds, and UseOFDLocks returns nil.
func UseOFDLocks() error {
	if _, err := sqlite.OFDLocking(true); err != nil && !errors.Is(err, sqlite.ErrOFDLockingUnavailable) {
		return fmt.Errorf("SQLite OFD locking not enabled: %w", err)
	}
	return nil
}

// MinSQLiteVersion is the first SQLite release with the WAL-reset fix
// the agent relies on (docs/design.md, safety rules); agentd refuses to
// run on an older embedded one (internal/version.SQLite asks it).
const MinSQLiteVersion = "3.51.3"

// ErrSQLiteTooOld marks an embedded SQLite older than MinSQLiteVersion.
var ErrSQLiteTooOld = errors.New("embedded SQLite too old")

// CheckSQLiteVersion returns nil when v is at least MinSQLiteVersion, else
// an ErrSQLiteTooOld that says why it matters.
func CheckSQLiteVersion(v string) error {
	if VersionAtLeast(v, MinSQLiteVersion) {
		return nil
	}
	return fmt.Errorf("%w: this build embeds SQLite %s, older than %s, which fixes a WAL-reset corruption; upgrade stateguard (a build with modernc.org/sqlite embedding SQLite ≥ %s)",
		ErrSQLiteTooOld, v, MinSQLiteVersion, MinSQLiteVersion)
}

// VersionAtLeast compares dotted decimal versions; a malformed one is
// never new enough.
func VersionAtLeast(v, min string) bool {
	a, b := strings.Split(v, "."), strings.Split(min, ".")
	for i := range max(len(a), len(b)) {
		x, y := 0, 0
		var err error
		if i < len(a) {
			if x, err = strconv.Atoi(a[i]); err != nil {
				return false
			}
		}
		if i < len(b) {
			y, _ = strconv.Atoi(b[i])
		}
		if x != y {
			return x > y
		}
	}
	return true
}
