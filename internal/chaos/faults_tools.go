package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// toolScript is the operator's command line for a tool fault, run by sh
// in the profile's directory with the backup's absolute path as src. Each
// is what issue 13 measured by hand; none is a stateguard command.
func toolScript(kind, src, aside string) string {
	q := shellQuote(src)
	switch kind {
	case FaultCpInplace:
		// GNU cp opens the existing state.db O_TRUNC and writes into it:
		// the same inode, truncated and rewritten; -wal/-shm stay.
		return "cp " + q + " state.db"
	case FaultRsyncInplace:
		// --ignore-times: rsync's quick check skips a file whose size
		// and mtime (to the second) match, and a backup taken within
		// the second of the main's last checkpoint often does; the
		// "restore" then wrote nothing, and the harness judged rows the
		// store never lost as rolled back (seed 2: 13 "replayed back").
		return "rsync --inplace --ignore-times " + q + " state.db"
	case FaultMvAsideCopy:
		// The old inode lives on as state.db.old with its writers; the
		// old -wal/-shm stay at the path next to the new main.
		return "mv state.db " + aside + " && cp " + q + " state.db"
	case FaultCpRmSidecars:
		return "cp " + q + " state.db && rm -f state.db-wal state.db-shm"
	case FaultTarExtract:
		// GNU tar unlinks an existing file and creates a new one.
		return "tar -xf " + q
	case FaultSqlite3Restore:
		// SQLite's own backup API into the live file (same inode, live
		// connections see the restored pages). A read-write CLI on a
		// live store: with the guard off it can be the last closer.
		return "sqlite3 state.db " + shellQuote(".restore '"+src+"'")
	}
	return ""
}

// toolNeeds is the executable a tool fault runs, to skip the fault with
// a reason where it is not installed.
func toolNeeds(kind string) string {
	if base := downBase(kind); base != "" {
		kind = base
	}
	switch kind {
	case FaultRsyncInplace:
		return "rsync"
	case FaultTarExtract:
		return "tar"
	case FaultSqlite3Restore:
		return "sqlite3"
	case FaultCpInplace, FaultMvAsideCopy, FaultCpRmSidecars:
		return "cp"
	}
	return ""
}

// toolFault restores a backup taken seconds earlier with a real tool and
// records the restore like restoreFault does, with the span the tool ran:
// rows stamped before it may be rolled back, rows stamped while it ran are
// counted apart (issue 13: salvaged or counted in the incident), rows
// after it must survive.
func (r *run) toolFault(ctx context.Context, kind string, p *profile) (string, error) {
	bk, bkAt, err := r.backup(ctx, p)
	if err != nil {
		return "", err
	}
	src := bk
	if kind == FaultTarExtract {
		if src, err = makeTarball(ctx, bk); err != nil {
			return "", err
		}
	}
	aside := ""
	if kind == FaultMvAsideCopy {
		aside = p.asideName()
	}
	script := toolScript(kind, src, aside)
	age := r.between(time.Second, 4*time.Second)
	sleepCtx(ctx, age)
	pids := r.writerPids(p)
	up := r.agent.isUp()
	if aside != "" {
		// Recorded before it exists: a run stopped mid-fault still
		// knows the file is the operator's.
		p.addOperatorFile(aside)
	}
	var start, done time.Time
	var out string
	for attempt := 1; ; attempt++ {
		start = time.Now()
		out, err = runOperator(ctx, p.dir, script)
		done = time.Now()
		// sqlite3 gives up on a write lock a live writer holds, before
		// the backup API wrote a page: nothing changed, try again.
		if err == nil || kind != FaultSqlite3Restore || attempt == 10 || !busyOutput(out) {
			break
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			break
		}
	}
	if err != nil && kind == FaultSqlite3Restore && busyOutput(out) {
		return "", fmt.Errorf("`%s` in %s: %v: %s", script, p.dir, err, out)
	}
	// Any other failure may have changed the store half-way: the restore
	// is recorded, so no row is called lost for a restore that happened.
	p.recordRestore(restore{Start: start, At: done, Backup: bk, BackupAt: bkAt, Kind: kind, Command: script})
	if up {
		r.measureFreeze(kind, p, pids, start)
	}
	if err != nil {
		return "", fmt.Errorf("`%s` in %s: %v: %s", script, p.dir, err, out)
	}
	return fmt.Sprintf("`%s` in %s (backup %v old) ran %v from %s", script, p.dir, age.Round(time.Millisecond),
		done.Sub(start).Round(time.Microsecond), start.UTC().Format("15:04:05.000000")), nil
}

// busyOutput is the sqlite3 shell's answer when .restore could not take
// the write lock ("database is locked", "source database is busy").
func busyOutput(out string) bool {
	return strings.Contains(out, "locked") || strings.Contains(out, "busy")
}

// runOperator runs script with sh in dir, as an operator at a shell would.
func runOperator(ctx context.Context, dir, script string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "sh", "-c", script)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// makeTarball packs the backup as state.db into <backup>.tar with the real
// tar: a tarball of a home taken from a consistent backup. It holds the
// store only (no -wal/-shm, nothing else of the home), so extracting it
// measures what tar does to the store.
func makeTarball(ctx context.Context, bk string) (string, error) {
	stage := bk + ".tar.d"
	if err := os.Mkdir(stage, 0o700); err != nil {
		return "", fmt.Errorf("stage tarball: %w", err)
	}
	if err := copyFile(bk, filepath.Join(stage, "state.db")); err != nil {
		return "", fmt.Errorf("stage tarball: %w", err)
	}
	tarball := bk + ".tar"
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(cctx, "tar", "-cf", tarball, "-C", stage, "state.db").CombinedOutput(); err != nil {
		return "", fmt.Errorf("tar -cf %s: %v: %s", tarball, err, strings.TrimSpace(string(out)))
	}
	return tarball, os.RemoveAll(stage)
}

// asideName is where mv-aside-copy moves state.db: state.db.old, unless
// an earlier one is still there (the harness removes it only once nothing
// holds it), so one fault never unlinks the previous one's orphan.
func (p *profile) asideName() string {
	p.mu.Lock()
	n := p.nBackup
	p.mu.Unlock()
	name := "state.db.old"
	if _, err := os.Lstat(filepath.Join(p.dir, name)); errors.Is(err, fs.ErrNotExist) {
		return name
	}
	return fmt.Sprintf("state.db.old.%d", n)
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// containerSubFaults are the incident faults a container-writer fault
// runs on the host under the container writers.
var containerSubFaults = []string{FaultRestoreRename, FaultRestoreDelete, FaultUnlink, FaultMispaired}

// containerFault runs one of the existing incident faults on the host
// against the profile whose writers include writers in containers (their
// own mount and pid namespaces, the profile directory as a volume at
// another path), once one of those is running.
func (r *run) containerFault(ctx context.Context, p *profile) (string, error) {
	var pids []int
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids = pids[:0]
		for _, s := range r.slots {
			if s.p == p && s.container != "" && s.pid() != 0 {
				pids = append(pids, s.pid())
			}
		}
		if len(pids) > 0 || time.Now().After(deadline) || !sleepCtx(ctx, 50*time.Millisecond) {
			break
		}
	}
	sub := containerSubFaults[r.intn(len(containerSubFaults))]
	var msg string
	var err error
	if sub == FaultUnlink {
		msg, err = r.unlinkFault(p)
	} else {
		msg, err = r.restoreFault(ctx, sub, p, false)
	}
	return fmt.Sprintf("%s under container writers (host pids %v): %s", sub, pids, msg), err
}
