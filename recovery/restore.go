//go:build unix

package recovery

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/store"
)

// RestoreMode is how a restore puts a backup in place.
type RestoreMode string

const (
	// RestoreOnline copies the backup's pages into the live file with
	// SQLite's online backup API. The inode is kept, so every connection
	// that has the store open sees the restored rows at its next
	// transaction, and no process is orphaned.
	RestoreOnline RestoreMode = "online"
	// RestorePublish writes the backup next to the store and renames it
	// over the path (temp file, fsync, rename, directory fsync). It is for
	// a store that is missing or broken, and it orphans anyone still
	// holding the old files, so it needs a holder scan that proved none.
	RestorePublish RestoreMode = "publish"
)

var (
	// ErrBackupInvalid marks a backup that is not a usable Hermes store:
	// not a regular file, not SQLite, failing integrity_check, or without
	// the Hermes tables. Nothing was changed.
	ErrBackupInvalid = errors.New("backup is not a usable Hermes store")

	// ErrRestoreRefused marks a restore (or part of one) that was not done
	// because it could not be proved safe. Nothing was changed by the
	// refused part.
	ErrRestoreRefused = errors.New("restore refused")

	// ErrTargetChanged means the store's files changed between planning
	// and executing the restore; nothing was changed, plan again.
	ErrTargetChanged = errors.New("store changed since the restore was planned")
)

// Counts are a store's rows.
type Counts struct {
	Sessions int64 `json:"sessions"`
	Messages int64 `json:"messages"`
}

func (c Counts) String() string {
	return fmt.Sprintf("%d sessions, %d messages", c.Sessions, c.Messages)
}

// RestoreRequest names a backup and the store to restore it into.
type RestoreRequest struct {
	Backup string // a SQLite file holding a Hermes store
	Target string // the store's main file (state.db); its directory must exist
	// TempDir holds the private copy of the backup that SQLite opens
	// (default os.TempDir()). The copy needs as much space as the backup.
	TempDir string
	// Now names the safety copy (default time.Now); UTC is used.
	Now func() time.Time
}

// RestorePlan is a checked restore that has changed nothing yet. Close it
// to remove the private copy of the backup.
type RestorePlan struct {
	Backup string // absolute path of the backup
	Target string // absolute path of the store's main file
	Mode   RestoreMode
	// TargetState is "healthy", "missing" or "broken: <why>".
	TargetState string
	BackupRows  Counts
	BackupShape string // the backup's schema shape (store.Schema.Shape)
	// Before are the store's rows now; zero unless it is healthy.
	Before Counts
	// Sidecars are the -wal/-shm at the path next to a missing or broken
	// main. A publish must remove them first (the next opener would
	// recover a foreign WAL into the new main), which needs a clear scan.
	Sidecars []string

	now     func() time.Time
	priv    string // private directory holding privDB
	privDB  string
	dir     string      // the store's directory, symlink-resolved at the plan
	dirID   store.DirID // dir as the plan found it; every later step checks it
	base    string      // the store's file name
	owner   Owner       // owner of the store's files (of the directory when missing)
	files   [3]fileState
	pageSz  int64
	closing bool
}

// fileState is what lstat said about one of the store's three paths.
type fileState struct {
	exists bool
	id     fileid.ID
	size   int64
}

// Roles of the store's three files in RestorePlan.files.
const (
	roleMain = iota
	roleWAL
	roleSHM
)

var roleSuffix = [3]string{"", "-wal", "-shm"}

// PlanRestore checks a restore without changing anything: the backup is
// copied privately (a symlink is refused, never followed) and must be
// SQLite, pass integrity_check and have the Hermes tables; the store's
// directory must exist and be safe to write into; and the store itself is
// classified. A healthy store is restored online; a missing or broken one
// is published. A main file that is healthy SQLite but not a Hermes store,
// or not in WAL mode, is refused: it is not what a profile's state.db
// should be, and overwriting it is not a restore.
func PlanRestore(ctx context.Context, req RestoreRequest) (*RestorePlan, error) {
	if req.Backup == "" || req.Target == "" {
		return nil, errors.New("restore: backup and target are required")
	}
	backup, err := filepath.Abs(req.Backup)
	if err != nil {
		return nil, fmt.Errorf("restore: backup %s: %w", req.Backup, err)
	}
	target, err := filepath.Abs(req.Target)
	if err != nil {
		return nil, fmt.Errorf("restore: target %s: %w", req.Target, err)
	}
	if backup == target {
		return nil, fmt.Errorf("restore: %s is the store itself; name a backup file", backup)
	}
	// The operator's path is resolved once, here; from then on the
	// directory is reached without following any symlink and must stay
	// the one planned on (openStoreDir).
	dir := filepath.Dir(target)
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
		target = filepath.Join(dir, filepath.Base(target))
	}
	p := &RestorePlan{Backup: backup, Target: target, now: req.Now,
		dir: dir, base: filepath.Base(target)}
	if p.now == nil {
		p.now = time.Now
	}
	// The target's directory first: a restore into a directory that does
	// not exist should not first copy a large backup.
	if err := p.checkDir(); err != nil {
		return nil, err
	}
	tmp := req.TempDir
	if tmp == "" {
		tmp = os.TempDir()
	}
	if err := p.copyBackup(ctx, tmp); err != nil {
		p.Close()
		return nil, store.Explain(p.Backup, err)
	}
	if err := p.classifyTarget(ctx); err != nil {
		p.Close()
		return nil, store.Explain(p.Target, err)
	}
	if p.Mode == RestoreOnline {
		if err := p.matchPageSize(ctx); err != nil {
			p.Close()
			return nil, store.Explain(p.Target, err)
		}
	}
	return p, nil
}

// Close removes the private copy of the backup.
func (p *RestorePlan) Close() error {
	if p.priv == "" || p.closing {
		return nil
	}
	p.closing = true
	if err := os.RemoveAll(p.priv); err != nil {
		return fmt.Errorf("remove private copy %s: %w", p.priv, err)
	}
	return nil
}

// RestoreOptions are what the caller learned about the store's processes.
// Recovery knows nothing of processes or signals: the caller scans, and
// stops writers through Writers.
type RestoreOptions struct {
	// Clear says a holder scan proved that no other process holds any
	// file of the store. A publish over an existing main, and removing
	// leftover sidecars, need it: both would orphan a holder.
	Clear bool
	// Writers, when set, are stopped once this process holds the store's
	// write lock, so none of them is stopped inside a transaction of its
	// own. The caller releases them after Execute returns.
	Writers Writers
	// Retry bounds the wait for the store's write lock (default 30 s).
	Retry time.Duration
}

// Writers stops the processes that hold a store. Stop must return only
// once every one of them is stopped.
type Writers interface {
	Stop(ctx context.Context) error
}

// RestoreResult is what a restore did.
type RestoreResult struct {
	Mode   RestoreMode `json:"mode"`
	Target string      `json:"target"`
	Backup string      `json:"backup"`
	// SafetyCopy lists the files of the copy of the store taken before
	// anything changed; empty when there was nothing to copy.
	SafetyCopy []string `json:"safety_copy"`
	Before     Counts   `json:"before"`
	BackupRows Counts   `json:"backup_rows"`
	After      Counts   `json:"after"`
	// MainBefore and MainAfter are the main file's identity; an online
	// restore keeps it.
	MainBefore fileid.Pair `json:"main_before"`
	MainAfter  fileid.Pair `json:"main_after"`
	// RemovedSidecars are the leftover -wal/-shm a publish removed.
	RemovedSidecars []string `json:"removed_sidecars,omitempty"`
	Integrity       string   `json:"integrity"`
	// LockRetries counts the waits for another process's write lock.
	LockRetries int `json:"lock_retries,omitempty"`
	// Checkpointed: an online restore's pages were copied from the WAL
	// into the main file before its connection closed. False when another
	// connection was in the way; agentd checkpoints once the store is idle.
	Checkpointed bool `json:"checkpointed,omitempty"`
}

// RefusedError is a restore that was not done, and why.
type RefusedError struct {
	Target string
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("restore of %s refused: %s", e.Target, e.Reason)
}

func (e *RefusedError) Unwrap() error { return ErrRestoreRefused }

// NeedsClear reports whether Execute would refuse without a clear scan:
// a publish that replaces a main or removes sidecars.
func (p *RestorePlan) NeedsClear() bool {
	return p.Mode == RestorePublish && (p.files[roleMain].exists || len(p.Sidecars) > 0)
}

// Execute runs the planned restore. It first takes a safety copy of the
// store next to it (an online backup, or a byte copy of a broken store),
// then restores, then checks the result with integrity_check and counts
// its rows. A publish that needs a clear scan and was not given one
// returns a *RefusedError before anything changes.
func (p *RestorePlan) Execute(ctx context.Context, o RestoreOptions) (RestoreResult, error) {
	if p.privDB == "" || p.closing {
		return RestoreResult{}, errors.New("restore: plan is closed")
	}
	if o.Retry <= 0 {
		o.Retry = 30 * time.Second
	}
	res := RestoreResult{Mode: p.Mode, Target: p.Target, Backup: p.Backup, Before: p.Before,
		BackupRows: p.BackupRows, MainBefore: fileid.Pair(p.files[roleMain].id)}
	if p.Mode == RestoreOnline {
		res, err := p.executeOnline(ctx, o, res)
		return res, store.Explain(p.Target, err)
	}
	if p.NeedsClear() && !o.Clear {
		what := "replace the broken main file"
		if !p.files[roleMain].exists {
			what = "remove the leftover " + joinNames(p.Sidecars)
		}
		return res, &RefusedError{Target: p.Target, Reason: fmt.Sprintf("the store is %s and publishing the backup would %s, "+
			"which orphans any process still holding them; that needs a holder scan that proves no process holds the store (--force does not override it)", p.TargetState, what)}
	}
	res, err := p.executePublish(ctx, res)
	return res, store.Explain(p.Target, err)
}

func joinNames(paths []string) string {
	s := ""
	for i, p := range paths {
		if i > 0 {
			s += " and "
		}
		s += filepath.Base(p)
	}
	return s
}
