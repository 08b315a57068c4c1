package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"
)

// ErrMissing is returned by OpenReadOnly when no journal exists at
// the path: no agent ever ran with that state directory.
var ErrMissing = errors.New("no journal")

// OpenReadOnly opens an existing journal for reading only, so
// agentctl can list incidents and replay jobs while no agent runs. It never
// creates, migrates or writes the journal (mode=ro): a reader must not
// change what the next agent resumes from. It refuses a symlink, a
// database that is not a stateguard journal, and a schema newer than this
// build. Only the read methods (GetIncident, ListIncidents, Steps,
// ListJobs, GetJob, SchemaVersion) may be used on the result.
func OpenReadOnly(ctx context.Context, path string) (*Journal, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s (hint: the agent creates it on its first start; pass the agent's --state-dir)", ErrMissing, path)
	}
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("journal %s is not a regular file (%s): refusing to read it", path, fi.Mode().Type())
	}
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	q := url.Values{}
	q.Set("mode", "ro")
	q.Set("_busy_timeout", "10000")
	db, err := sql.Open("sqlite", "file:"+esc+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open journal %s read-only: %w", path, err)
	}
	db.SetMaxOpenConns(2)
	j := &Journal{path: path, db: db, log: subsystemLogger(nil), now: time.Now}
	fail := func(err error) (*Journal, error) {
		db.Close()
		return nil, err
	}
	var appID, version int
	if err := db.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return fail(fmt.Errorf("open journal %s read-only: %w", path, err))
	}
	if appID != applicationID {
		return fail(fmt.Errorf("%s is not a stateguard journal (application_id %#x)", path, appID))
	}
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fail(fmt.Errorf("open journal %s read-only: %w", path, err))
	}
	ms, err := loadMigrations()
	if err != nil {
		return fail(err)
	}
	if version > len(ms) {
		return fail(fmt.Errorf("journal %s: %w: schema version %d, this build knows up to %d; use the newer agentctl",
			path, ErrTooNew, version, len(ms)))
	}
	if version < len(ms) {
		// The tables this build queries may not exist yet; the agent
		// migrates on its next start.
		return fail(fmt.Errorf("journal %s is at schema version %d, this build reads %d (hint: start the agent once to migrate it)",
			path, version, len(ms)))
	}
	return j, nil
}
