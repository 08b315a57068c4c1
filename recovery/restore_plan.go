//go:build unix

package recovery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/store"
)

// checkDir vets the store's directory: it must exist, be a real directory
// (not a symlink) and not be writable by others.
func (p *RestorePlan) checkDir() error {
	d, err := openStorePath(p.dir)
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("restore: the store's directory %s does not exist: check --profile/--home (a profile's directory is created by Hermes), nothing was changed", p.dir)
	}
	if err != nil {
		return fmt.Errorf("restore into %s: %w", p.dir, err)
	}
	defer d.close()
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", p.dir, err)
	}
	p.owner = Owner{UID: int(st.Uid), GID: int(st.Gid)}
	p.dirID = d.want
	return nil
}

// copyBackup copies the backup (and a -wal or hot -journal next to it)
// into a private directory and checks the copy: SQLite opens only that,
// so nothing is ever created next to the operator's backup and a file
// swapped in after the checks cannot be what is restored.
func (p *RestorePlan) copyBackup(ctx context.Context, tmp string) error {
	f, size, err := openBackupFile(p.Backup, "")
	if err != nil {
		return err
	}
	defer f.Close()
	head, err := readHead(f, sqliteHeaderBytes)
	if err != nil {
		return fmt.Errorf("read %s: %w", p.Backup, err)
	}
	switch {
	case len(head) == 0:
		return fmt.Errorf("%w: %s is empty", ErrBackupInvalid, p.Backup)
	case len(head) < len(store.MainMagic) || string(head[:len(store.MainMagic)]) != store.MainMagic:
		return fmt.Errorf("%w: %s is not a SQLite database (no \"SQLite format 3\" header at its start)", ErrBackupInvalid, p.Backup)
	}
	priv, err := os.MkdirTemp(tmp, "stateguard-restore-")
	if err != nil {
		return fmt.Errorf("restore: private copy of %s: %w (set TMPDIR to a directory with room for the backup)", p.Backup, err)
	}
	p.priv = priv
	pd, err := openVettedDir(priv)
	if err != nil {
		return fmt.Errorf("restore: private copy: %w", err)
	}
	defer pd.close()
	self := Owner{UID: os.Geteuid(), GID: os.Getegid()}
	if _, err := copyIntoDir(ctx, f, p.Backup, size, pd, "state.db", self, true); err != nil {
		return fmt.Errorf("restore: copy %s: %w", p.Backup, err)
	}
	// A backup copied from a live store may carry committed frames in its
	// -wal, or a hot journal to roll back; SQLite would use them when
	// opening the backup in place, so the copy must have them too.
	for _, suffix := range []string{"-wal", "-journal"} {
		sf, ssize, err := openBackupFile(p.Backup+suffix, suffix)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		_, err = copyIntoDir(ctx, sf, p.Backup+suffix, ssize, pd, "state.db"+suffix, self, true)
		sf.Close()
		if err != nil {
			return fmt.Errorf("restore: copy %s: %w", p.Backup+suffix, err)
		}
	}
	if err := pd.sync(); err != nil {
		return err
	}
	p.privDB = filepath.Join(priv, "state.db")
	return p.checkBackup(ctx)
}

// openBackupFile opens one file of the backup without following a
// symlink. For the main file (suffix "") a missing file is an error; for
// a sidecar it is fs.ErrNotExist, unwrapped.
func openBackupFile(path, suffix string) (*os.File, int64, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if suffix != "" {
			return nil, 0, fs.ErrNotExist
		}
		return nil, 0, fmt.Errorf("%w: %s does not exist", ErrBackupInvalid, path)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("restore: %w", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		dest, _ := os.Readlink(path)
		return nil, 0, fmt.Errorf("%w: %s is a symlink (to %s); it is not followed: name the real file", ErrBackupInvalid, path, dest)
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%w: %s is not a regular file (%v)", ErrBackupInvalid, path, fi.Mode().Type())
	}
	f, err := openNoFollow(path)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, 0, fmt.Errorf("%w: %s became a symlink; it is not followed", ErrBackupInvalid, path)
		}
		return nil, 0, fmt.Errorf("restore: open %s: %w", path, err)
	}
	st, err := fstatFile(f)
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("restore: stat %s: %w", path, err)
	}
	if !isRegular(&st) {
		f.Close()
		return nil, 0, fmt.Errorf("%w: %s is not a regular file", ErrBackupInvalid, path)
	}
	return f, st.Size, nil
}

// checkBackup opens the private copy: integrity_check must say ok, the
// Hermes tables must be there, and the copy is put in WAL mode (as every
// Hermes store is), so that a published copy is one.
func (p *RestorePlan) checkBackup(ctx context.Context) error {
	db, err := sql.Open("sqlite", "file:"+escapeURIPath(p.privDB)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return fmt.Errorf("restore: open private copy of %s: %w", p.Backup, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	problems, err := integrityCheck(ctx, db, "integrity_check")
	if err != nil {
		return fmt.Errorf("%w: %s: SQLite cannot read it: %w", ErrBackupInvalid, p.Backup, err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s fails integrity_check: %s", ErrBackupInvalid, p.Backup, strings.Join(problems, "; "))
	}
	schema, err := store.Probe(ctx, db)
	if nh, ok := errors.AsType[*store.NotHermesError](err); ok {
		return fmt.Errorf("%w: %s is SQLite but not a Hermes store: %s", ErrBackupInvalid, p.Backup, nh.Reason)
	}
	if err != nil {
		return fmt.Errorf("restore: probe %s: %w", p.Backup, err)
	}
	p.BackupShape = schema.Shape
	if p.BackupRows, err = countRows(ctx, db); err != nil {
		return fmt.Errorf("restore: count rows of %s: %w", p.Backup, err)
	}
	if !strings.EqualFold(schema.JournalMode, "wal") {
		var mode string
		if err := db.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode); err != nil || !strings.EqualFold(mode, "wal") {
			return fmt.Errorf("restore: put the private copy of %s in WAL mode: %v (mode %q)", p.Backup, err, mode)
		}
	}
	return nil
}

// classifyTarget decides between an online restore (healthy store) and a
// publish (missing or broken), reading the main file's header through a
// raw fd before any SQLite connection to it exists in this process.
//
// Everything is read through the handle on the directory checkDir
// recorded (no symlink in any component, the same inode and owner), never
// by name: a directory swapped in since is refused, not classified.
func (p *RestorePlan) classifyTarget(ctx context.Context) error {
	d, err := openStoreDir(p.dir, p.dirID)
	if err != nil {
		return fmt.Errorf("restore into %s: %w; nothing was changed", p.dir, err)
	}
	defer d.close()
	for i, suffix := range roleSuffix {
		path := p.Target + suffix
		st, err := d.lstat(p.base + suffix)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("restore: lstat %s: %w", path, err)
		}
		if !isRegular(&st) {
			what := "special file"
			switch {
			case isSymlink(&st):
				what = "symlink"
			case isDir(&st):
				what = "directory"
			}
			return fmt.Errorf("restore: %s is a %s, not a regular file; a store file never is anything else, so nothing is touched: move it away first", path, what)
		}
		p.files[i] = fileState{exists: true, id: fileid.FromStat(&st), size: st.Size}
		if i == roleMain {
			p.owner = Owner{UID: int(st.Uid), GID: int(st.Gid)}
		}
	}
	if !p.files[roleMain].exists {
		p.publish("missing")
		return nil
	}
	f, err := openatRegular(d, p.base)
	if err != nil {
		return fmt.Errorf("restore: open %s: %w", p.Target, err)
	}
	if st, err := fstatFile(f); err != nil || fileid.FromStat(&st) != p.files[roleMain].id {
		f.Close()
		return fmt.Errorf("restore: %s changed while it was inspected (%v): nothing was changed, retry", p.Target, err)
	}
	head, err := readHead(f, sqliteHeaderBytes)
	f.Close() // before any SQLite connection: close() drops POSIX locks
	if err != nil {
		return fmt.Errorf("restore: read %s: %w", p.Target, err)
	}
	switch {
	case len(head) == 0:
		p.publish("broken: empty file")
		return nil
	case len(head) < sqliteHeaderBytes || string(head[:len(store.MainMagic)]) != store.MainMagic:
		p.publish("broken: no SQLite header")
		return nil
	case head[18] != 2 || head[19] != 2:
		return fmt.Errorf("restore: %s is a SQLite database in rollback-journal mode; Hermes stores are WAL, so this is not a profile's store: nothing was changed (is this the right file?)", p.Target)
	}
	why, err := p.checkTarget(ctx, d)
	if err != nil {
		return err
	}
	if why != "" {
		p.publish("broken: " + why)
		return nil
	}
	p.Mode, p.TargetState = RestoreOnline, "healthy"
	return nil
}

func (p *RestorePlan) publish(state string) {
	p.Mode, p.TargetState = RestorePublish, state
	for _, r := range []int{roleWAL, roleSHM} {
		if p.files[r].exists {
			p.Sidecars = append(p.Sidecars, p.Target+roleSuffix[r])
		}
	}
}

// checkTarget opens the store read-only and returns why it is broken, or
// "" when it is healthy. Without a -wal it opens it immutable, so the
// check creates no -wal/-shm (which a publish would then have to remove).
// SQLite opens it by name, inside store.OpenSQLiteIn's checks against the
// recorded directory; the sidecars are checked through d first, so SQLite
// never follows a -wal or -shm that is a link.
func (p *RestorePlan) checkTarget(ctx context.Context, d capDir) (string, error) {
	for _, sfx := range []string{"-wal", "-shm"} {
		st, err := d.lstat(p.base + sfx)
		if err == nil && !isRegular(&st) {
			return "", fmt.Errorf("restore: %s%s is not a regular file (symlinks are not followed): %w", p.Target, sfx, store.ErrNotRegular)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return "", fmt.Errorf("restore: lstat %s%s: %w", p.Target, sfx, err)
		}
	}
	immutable := !p.files[roleWAL].exists
	db, err := store.OpenSQLiteIn(p.dir, p.dirID, p.base, func(path string) (*sql.DB, error) {
		dsn := "file:" + escapeURIPath(path) + "?mode=ro&_pragma=busy_timeout(5000)"
		if immutable {
			dsn += "&immutable=1"
		}
		db, err := store.OpenLive(path, dsn)
		if err == nil {
			db.SetMaxOpenConns(1)
			// Open the file now, between OpenSQLiteIn's two checks;
			// the pool keeps this connection for the queries below.
			if err = db.PingContext(ctx); err != nil {
				db.Close()
			}
		}
		return db, err
	})
	if err != nil {
		return "", fmt.Errorf("restore: open %s: %w", p.Target, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	problems, err := integrityCheck(ctx, db, "quick_check")
	if err != nil {
		return "SQLite cannot read it: " + err.Error(), nil
	}
	if len(problems) > 0 {
		return "quick_check: " + strings.Join(problems, "; "), nil
	}
	if _, err := store.Probe(ctx, db); err != nil {
		if nh, ok := errors.AsType[*store.NotHermesError](err); ok {
			return "", fmt.Errorf("restore: %s is a healthy SQLite database but not a Hermes store (%s); restore refuses to overwrite it: nothing was changed", p.Target, nh.Reason)
		}
		return "", fmt.Errorf("restore: probe %s: %w", p.Target, err)
	}
	if p.Before, err = countRows(ctx, db); err != nil {
		return "", fmt.Errorf("restore: count rows of %s: %w", p.Target, err)
	}
	if err := db.QueryRowContext(ctx, "PRAGMA page_size").Scan(&p.pageSz); err != nil {
		return "", fmt.Errorf("restore: page size of %s: %w", p.Target, err)
	}
	return "", nil
}

// matchPageSize rewrites the private copy with the store's page size:
// SQLite's backup API cannot copy into a WAL database of another page
// size.
func (p *RestorePlan) matchPageSize(ctx context.Context) error {
	db, err := sql.Open("sqlite", "file:"+escapeURIPath(p.privDB)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return fmt.Errorf("restore: open private copy: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	var have int64
	if err := db.QueryRowContext(ctx, "PRAGMA page_size").Scan(&have); err != nil {
		return fmt.Errorf("restore: page size of %s: %w", p.Backup, err)
	}
	if have == p.pageSz || p.pageSz == 0 {
		return nil
	}
	for _, q := range []string{"PRAGMA journal_mode=DELETE", fmt.Sprintf("PRAGMA page_size=%d", p.pageSz), "VACUUM", "PRAGMA journal_mode=WAL"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("restore: convert the private copy of %s from page size %d to the store's %d: %s: %w", p.Backup, have, p.pageSz, q, err)
		}
	}
	if err := db.QueryRowContext(ctx, "PRAGMA page_size").Scan(&have); err != nil || have != p.pageSz {
		return fmt.Errorf("restore: private copy of %s still has page size %d, the store %d (%v)", p.Backup, have, p.pageSz, err)
	}
	return nil
}

// integrityCheck runs PRAGMA integrity_check or quick_check and returns
// its complaints (none when it says ok), at most 20.
func integrityCheck(ctx context.Context, q store.Querier, pragma string) ([]string, error) {
	rows, err := q.QueryContext(ctx, "PRAGMA "+pragma+"(20)")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		if s != "ok" {
			out = append(out, s)
		}
	}
	return out, rows.Err()
}

// countRows counts sessions and messages.
func countRows(ctx context.Context, q store.Querier) (Counts, error) {
	rows, err := q.QueryContext(ctx, "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM messages)")
	if err != nil {
		return Counts{}, err
	}
	defer rows.Close()
	var c Counts
	if rows.Next() {
		if err := rows.Scan(&c.Sessions, &c.Messages); err != nil {
			return Counts{}, err
		}
	}
	return c, rows.Err()
}
