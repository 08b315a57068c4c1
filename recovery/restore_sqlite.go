package recovery

import (
	"strings"

	"modernc.org/sqlite"

	"github.com/stateguard/stateguard/store"
)

// sqliteBackup is modernc's online backup handle.
type sqliteBackup = sqlite.Backup

// setPersistWAL: a frozen writer may still hold -wal/-shm while the
// restore's connection is the last open one, so it must never unlink them.
var setPersistWAL = store.SetPersistWAL

// escapeURIPath escapes what would end or change a SQLite URI's path.
func escapeURIPath(abs string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(abs)
}
