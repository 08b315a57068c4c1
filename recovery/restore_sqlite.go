package recovery

import (
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
)

// sqliteBackup is modernc's online backup handle.
type sqliteBackup = sqlite.Backup

// setPersistWAL sets and reads back PERSIST_WAL on a driver connection
// (for conn.Raw), so closing it never unlinks -wal/-shm: a frozen writer
// may still hold them while this is the last open connection.
func setPersistWAL(dc any) error {
	fc, ok := dc.(sqlite.FileControl)
	if !ok {
		return errors.New("driver connection has no file control")
	}
	if _, err := fc.FileControlPersistWAL("main", 1); err != nil {
		return err
	}
	mode, err := fc.FileControlPersistWAL("main", -1)
	if err != nil {
		return err
	}
	if mode != 1 {
		return fmt.Errorf("PERSIST_WAL reads back %d", mode)
	}
	return nil
}

// escapeURIPath escapes what would end or change a SQLite URI's path.
func escapeURIPath(abs string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(abs)
}
