package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// restoreFallback is _safe_restore_db's fallback publish: only when no
// other process provably holds the store's main, -wal or -shm.
func restoreFallback(db, backup string) error {
	holders, err := familyHolders(db)
	if err != nil {
		return fmt.Errorf("refusing fallback restore of %s: holder state could not be proven: %w", db, err)
	}
	if len(holders) > 0 {
		return fmt.Errorf("refusing fallback restore of %s: process(es) %v still hold the database family", db, holders)
	}
	tmp := filepath.Join(filepath.Dir(db), "."+filepath.Base(db)+".snap_restore")
	if err := copyFile(backup, tmp); err != nil {
		return err
	}
	defer os.Remove(tmp)
	for _, s := range []string{"-wal", "-shm"} {
		if err := os.Remove(db + s); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("remove %s%s: %w", db, s, err)
		}
	}
	if err := os.Rename(tmp, db); err != nil {
		return fmt.Errorf("publish %s: %w", db, err)
	}
	return syncPath(filepath.Dir(db))
}

// familyHolders lists the other processes with an fd on db, db-wal or
// db-shm, as Hermes' _foreign_db_holder_pids does (by /proc readlink).
func familyHolders(db string) ([]int, error) {
	abs, err := filepath.Abs(db)
	if err != nil {
		return nil, err
	}
	watched := map[string]bool{abs: true, abs + "-wal": true, abs + "-shm": true}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name()))
			if err == nil && watched[strings.TrimSuffix(target, " (deleted)")] {
				out = append(out, pid)
				break
			}
		}
	}
	return out, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open backup %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("stage %s: %w", dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("stage %s: %w", dst, err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return fmt.Errorf("stage %s: %w", dst, err)
	}
	return out.Close()
}
