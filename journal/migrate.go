package journal

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Each file is one migration, NNNN_name.sql, applied in its own
// transaction together with the bump of PRAGMA user_version and its row in
// schema_migrations. Never edit a released file: add the next one.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	entries, err := migrationFS.ReadDir("migrations")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_name.sql", e.Name())
		}
		b, err := migrationFS.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	sort.Slice(ms, func(a, b int) bool { return ms[a].version < ms[b].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %04d_%s: versions must run 1..N without gaps", m.version, m.name)
		}
	}
	return ms, nil
}

func (j *Journal) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	var appID, version, objects int
	if err := j.db.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return fmt.Errorf("open journal %s: %w", j.path, err)
	}
	if err := j.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("open journal %s: %w", j.path, err)
	}
	if err := j.db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&objects); err != nil {
		return fmt.Errorf("open journal %s: %w", j.path, err)
	}
	if appID != applicationID && (appID != 0 || objects > 0) {
		return fmt.Errorf("%s is a SQLite database but not a stateguard journal (application_id %#x): refusing to touch it; point the agent at its own state directory", j.path, appID)
	}
	if version > len(ms) {
		return fmt.Errorf("journal %s: %w: it is at schema version %d and this agent knows up to %d; run the newer stateguard, or move the journal aside to start a fresh one", j.path, ErrTooNew, version, len(ms))
	}
	for _, m := range ms[version:] {
		applied, err := j.applyMigration(ctx, m)
		if err != nil {
			return err
		}
		if applied {
			j.log.Info("journal migrated", "event", "journal.migrated", "path", j.path, "version", m.version, "name", m.name)
		}
	}
	return nil
}

func (j *Journal) applyMigration(ctx context.Context, m migration) (applied bool, err error) {
	err = j.write(ctx, func(tx *sql.Tx) error {
		// Re-read under the write lock: agentctl may have opened the same
		// journal and migrated it since we looked.
		var cur int
		if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&cur); err != nil {
			return err
		}
		if cur >= m.version {
			return nil
		}
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return err
		}
		if m.version == 1 {
			if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA application_id = %d", applicationID)); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.version)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
			m.version, m.name, toNanos(j.now())); err != nil {
			return err
		}
		applied = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("journal %s: migration %04d_%s: %w", j.path, m.version, m.name, err)
	}
	return applied, nil
}
