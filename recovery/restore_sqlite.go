package recovery

import (
	"strings"

	"modernc.org/sqlite"
)

// sqliteBackup is modernc's online backup handle.
type sqliteBackup = sqlite.Backup

// escapeURIPath escapes what would end or change a SQLite URI's path.
func escapeURIPath(abs string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(abs)
}
