//go:build unix

package recovery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/store"
)

// executeOnline copies the backup's pages into the live store through one
// writable connection (PERSIST_WAL, so it never unlinks -wal/-shm). It
// first takes the store's write lock with the writers still running, and
// only then stops them: a writer stopped while we hold the lock cannot be
// inside a transaction of its own. The safety copy is taken under that
// lock, so it is exactly what the restore replaces.
func (p *RestorePlan) executeOnline(ctx context.Context, o RestoreOptions, res RestoreResult) (RestoreResult, error) {
	if err := p.unchanged(roleMain); err != nil {
		return res, err
	}
	d, err := openStoreDir(p.dir, p.dirID)
	if err != nil {
		return res, fmt.Errorf("restore into %s: %w", p.dir, err)
	}
	defer d.close()
	db, conn, err := openRestoreConn(ctx, p.dir, p.dirID, p.base)
	if err != nil {
		return res, err
	}
	defer db.Close()
	defer conn.Close()

	l := lockLoop{ctx: ctx, deadline: time.Now().Add(o.Retry), path: p.Target}
	var tx *sql.Tx
	for {
		if tx, err = conn.BeginTx(ctx, nil); err == nil { // BEGIN IMMEDIATE
			break
		}
		if err := l.busy(err); err != nil {
			return res, err
		}
	}
	if o.Writers != nil {
		if err := o.Writers.Stop(ctx); err != nil {
			tx.Rollback()
			return res, fmt.Errorf("restore: stop the writers of %s: %w (nothing was changed)", p.Target, err)
		}
	}
	res.SafetyCopy, err = p.onlineSafetyCopy(ctx, d)
	if rerr := tx.Rollback(); err == nil && rerr != nil {
		err = fmt.Errorf("restore: release the write lock on %s: %w", p.Target, rerr)
	}
	if err != nil {
		return res, err
	}
	// Between the rollback and the copy only a process that was not
	// stopped can take the lock; then wait for it as for any writer.
	src := "file:" + escapeURIPath(p.privDB) + "?mode=ro"
	for {
		err := conn.Raw(func(dc any) error { return backupInto(dc, src) })
		if err == nil {
			break
		}
		if err := l.busy(err); err != nil {
			return res, fmt.Errorf("%w (nothing was restored; the safety copy is %s)", err, strings.Join(res.SafetyCopy, ", "))
		}
	}
	res.LockRetries = l.retries
	if res, err = p.verify(ctx, conn, res); err != nil {
		return res, err
	}
	// The restored pages are in the WAL; with agentd's guard armed no
	// closer checkpoints them, and a leftover -wal deleted by hand would
	// take the restore with it.
	cp, err := store.TruncateCheckpoint(ctx, conn, restoreBusyTimeoutMS)
	res.Checkpointed = err == nil && cp.Done
	return res, nil
}

// restoreBusyTimeoutMS is the restore connection's wait per lock attempt;
// lockLoop retries on top of it.
const restoreBusyTimeoutMS = 1000

// verify checks the restored store and counts its rows.
func (p *RestorePlan) verify(ctx context.Context, q store.Querier, res RestoreResult) (RestoreResult, error) {
	problems, err := integrityCheck(ctx, q, "integrity_check")
	if err != nil {
		return res, fmt.Errorf("restore: check %s after restoring: %w (the safety copy is %s)", p.Target, err, strings.Join(res.SafetyCopy, ", "))
	}
	res.Integrity = "ok"
	if len(problems) > 0 {
		res.Integrity = strings.Join(problems, "; ")
		return res, fmt.Errorf("restore: %s fails integrity_check after restoring: %s (the safety copy is %s)", p.Target, res.Integrity, strings.Join(res.SafetyCopy, ", "))
	}
	if res.After, err = countRows(ctx, q); err != nil {
		return res, fmt.Errorf("restore: count rows of %s: %w", p.Target, err)
	}
	if st, err := lstatFile(p.Target); err == nil && st.exists {
		res.MainAfter = fileid.Pair(st.id)
	}
	return res, nil
}

// lockLoop is the bounded wait for the store's write lock, on top of
// SQLite's own busy timeout per attempt.
type lockLoop struct {
	ctx      context.Context
	deadline time.Time
	path     string
	retries  int
	backoff  time.Duration
}

// busy returns nil when err is a busy lock worth waiting for, after the
// wait; anything else, or the deadline, is returned as an error.
func (l *lockLoop) busy(err error) error {
	if !store.IsBusy(err) {
		return fmt.Errorf("restore into %s: %w", l.path, err)
	}
	if time.Now().After(l.deadline) {
		return fmt.Errorf("restore into %s: the write lock stayed taken: %w (another process keeps writing; use --stop-writers, or retry)", l.path, err)
	}
	l.retries++
	l.backoff = min(max(2*l.backoff, 10*time.Millisecond), 200*time.Millisecond)
	t := time.NewTimer(l.backoff/2 + rand.N(l.backoff/2+1))
	defer t.Stop()
	select {
	case <-l.ctx.Done():
		return fmt.Errorf("restore into %s: %w", l.path, l.ctx.Err())
	case <-t.C:
	}
	return nil
}

// restoreConn is the online restore's connection, as one closer.
type restoreConn struct {
	db   *sql.DB
	conn *sql.Conn
}

// MainFile is the file SQLite opened (store.MainFiler).
func (c restoreConn) MainFile(ctx context.Context) (string, error) {
	return store.MainFileOf(ctx, c.conn)
}

func (c restoreConn) Close() error {
	c.conn.Close()
	return c.db.Close()
}

// openRestoreConn opens the one writable connection an online restore
// uses on the store name in dir, through the directory's handle
// (store.OpenSQLiteIn: the planned directory, no symlink, a regular file
// of the directory's owner or root, the same inode after SQLite's open).
func openRestoreConn(ctx context.Context, dir string, want store.DirID, name string) (*sql.DB, *sql.Conn, error) {
	c, err := store.OpenSQLiteIn(dir, want, name, func(path string) (restoreConn, error) {
		db, conn, err := openRestoreConnAt(ctx, path)
		return restoreConn{db, conn}, err
	})
	if err != nil {
		return nil, nil, err // the inner open's say "restore:"; the checks name the file
	}
	return c.db, c.conn, nil
}

// openRestoreConnAt opens it by name: mode=rw (never creates),
// PERSIST_WAL set before anything else, a short busy timeout (the caller
// retries), and the store must be WAL.
func openRestoreConnAt(ctx context.Context, path string) (*sql.DB, *sql.Conn, error) {
	if err := store.SidecarsRegular(path); err != nil {
		return nil, nil, fmt.Errorf("restore: %w", err)
	}
	db, err := store.OpenLive(path, "file:"+escapeURIPath(path)+"?mode=rw&_txlock=immediate&_pragma=busy_timeout("+strconv.Itoa(restoreBusyTimeoutMS)+")")
	if err != nil {
		return nil, nil, fmt.Errorf("restore: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("restore: open %s: %w", path, err)
	}
	fail := func(err error) (*sql.DB, *sql.Conn, error) {
		conn.Close()
		db.Close()
		return nil, nil, err
	}
	if err := conn.Raw(store.SetPersistWAL); err != nil {
		return fail(fmt.Errorf("restore: set PERSIST_WAL on %s: %w (refusing to write without it)", path, err))
	}
	var n int
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master").Scan(&n); err != nil {
		return fail(fmt.Errorf("restore: read %s: %w", path, err))
	}
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fail(fmt.Errorf("restore: journal mode of %s: %w", path, err))
	}
	if !strings.EqualFold(mode, "wal") {
		return fail(fmt.Errorf("restore: %s: journal mode is %s: %w", path, mode, store.ErrNotWALStore))
	}
	return db, conn, nil
}

// onlineSafetyCopy backs the live store up next to itself with SQLite's
// online backup API, as <name>.pre-restore-<UTC>: created O_EXCL|O_NOFOLLOW
// mode 0600 as <name>.partial, filled, fsynced, then renamed (never over
// an existing file).
func (p *RestorePlan) onlineSafetyCopy(ctx context.Context, d capDir) ([]string, error) {
	name, err := p.safetyName(d)
	if err != nil {
		return nil, err
	}
	partial := name + partialSuffix
	f, err := d.createExcl(partial, p.owner)
	if err != nil {
		return nil, fmt.Errorf("restore: safety copy: %w", err)
	}
	f.Close() // a new inode of our own: no SQLite lock of ours is on it
	ok := false
	defer func() {
		if !ok {
			_ = unix.Unlinkat(d.fd, partial, 0)
		}
	}()
	created, err := d.lstat(partial)
	if err != nil {
		return nil, fmt.Errorf("restore: safety copy %s: %w", d.join(partial), err)
	}
	if err := p.backupLive(ctx, d.join(partial)); err != nil {
		return nil, fmt.Errorf("restore: safety copy of %s into %s: %w (nothing was restored)", p.Target, d.join(partial), err)
	}
	// SQLite opened the copy by name: what it wrote must be the file
	// created above, in the directory d names.
	if st, err := d.lstat(partial); err != nil || fileid.FromStat(&st) != fileid.FromStat(&created) || st.Size == 0 {
		return nil, fmt.Errorf("restore: safety copy %s: %w: SQLite did not write the file created for it (err %v); nothing was restored",
			d.join(partial), fileid.ErrIdentityChanged, err)
	}
	if err := fsyncAt(d, partial); err != nil {
		return nil, err
	}
	if err := renameNoReplace(d.fd, partial, d.fd, name); err != nil {
		return nil, fmt.Errorf("restore: publish safety copy %s: %w", d.join(name), err)
	}
	ok = true
	if err := d.sync(); err != nil {
		return []string{d.join(name)}, err
	}
	return []string{d.join(name)}, nil
}

// backupLive copies the live store into the file at dst with SQLite's
// backup API. The source is read through a connection opened inside
// store.OpenSQLiteIn's checks (the planned directory, reached without a
// symlink, and the file SQLite opened being the store's), never a second
// open by name: a directory swapped for a link to another user's must not
// get that user's store copied into this one's directory. It reads the
// last committed state, which under the restore's write lock, with the
// writers stopped, is what the restore replaces. The copy's journal is
// off (nothing else appears next to the store) and so is synchronous
// (the caller fsyncs once).
func (p *RestorePlan) backupLive(ctx context.Context, dst string) error {
	src, err := store.OpenSQLiteIn(p.dir, p.dirID, p.base, store.OpenReadOnly)
	if err != nil {
		return err
	}
	defer src.Close()
	conn, err := src.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	dstURI := "file:" + escapeURIPath(dst) + "?mode=rw&_pragma=journal_mode(off)&_pragma=synchronous(off)"
	deadline := time.Now().Add(30 * time.Second)
	for {
		err = conn.Raw(func(dc any) error { return backupFrom(dc, dstURI) })
		if err == nil || !store.IsBusy(err) || time.Now().After(deadline) {
			return err
		}
	}
}

// backupFrom copies the driver connection dc's database into dstURI.
func backupFrom(dc any, dstURI string) error {
	b, ok := dc.(interface {
		NewBackup(string) (*sqliteBackup, error)
	})
	if !ok {
		return errors.New("the SQLite driver connection has no backup API")
	}
	bk, err := b.NewBackup(dstURI)
	if err != nil {
		return err
	}
	return stepAll(bk)
}

func stepAll(b *sqliteBackup) error {
	for {
		more, err := b.Step(-1)
		if err != nil {
			_ = b.Finish() // the step's error is the one to report
			return err
		}
		if !more {
			return b.Finish()
		}
	}
}

// safetyName picks <name>.pre-restore-<UTC> (with -2, -3, ... when taken)
// such that neither it, its -wal nor its .partial exists.
func (p *RestorePlan) safetyName(d capDir) (string, error) {
	stamp := p.base + ".pre-restore-" + p.now().UTC().Format("20060102-150405")
	for n := 1; n <= 100; n++ {
		name := stamp
		if n > 1 {
			name = fmt.Sprintf("%s-%d", stamp, n)
		}
		if !d.exists(name) && !d.exists(name+"-wal") && !d.exists(name+partialSuffix) && !d.exists(name+"-wal"+partialSuffix) {
			return name, nil
		}
	}
	return "", fmt.Errorf("restore: %s already has 100 safety copies named %s*: move some away", p.dir, stamp)
}

// backupInto runs SQLite's backup API from the database at srcURI into
// the driver connection dc, all pages in one step.
func backupInto(dc any, srcURI string) error {
	r, ok := dc.(interface {
		NewRestore(string) (*sqliteBackup, error)
	})
	if !ok {
		return errors.New("the SQLite driver connection has no backup API")
	}
	b, err := r.NewRestore(srcURI)
	if err != nil {
		return err
	}
	return stepAll(b)
}

func fsyncAt(d capDir, name string) error {
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", d.join(name), err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("fsync %s: %w", d.join(name), err)
	}
	return nil
}

// unchanged checks that the given roles are still the files the plan saw.
func (p *RestorePlan) unchanged(roles ...int) error {
	for _, r := range roles {
		path := p.Target + roleSuffix[r]
		st, err := lstatFile(path)
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		if st.exists != p.files[r].exists || st.id != p.files[r].id {
			return fmt.Errorf("restore: %s: %w; nothing was changed: run the restore again", path, ErrTargetChanged)
		}
	}
	return nil
}

func lstatFile(path string) (fileState, error) {
	var st unix.Stat_t
	err := unix.Lstat(path, &st)
	if errors.Is(err, unix.ENOENT) {
		return fileState{}, nil
	}
	if err != nil {
		return fileState{}, fmt.Errorf("lstat %s: %w", path, err)
	}
	return fileState{exists: true, id: fileid.FromStat(&st), size: st.Size}, nil
}
