//go:build unix

package recovery

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/store"
)

// QuarantineSidecars moves the store's -wal and -shm into captureDir (a
// staging or final capture directory of this store) by rename(2), for a
// mispaired store whose sidecars still belong to the old generation.
// want maps "-wal" and "-shm" to the identities recorded for the old
// generation; a suffix not in want is not touched.
//
// Each sidecar is moved only if its identity equals want: it is checked
// with fstatat right before its rename, and again on the moved file right
// after, because nothing in POSIX renames "only if still this inode". If a
// different file slipped in between, it is renamed back (never over
// anything) and the error wraps fileid.ErrIdentityChanged. The -wal goes first: it
// is the file a new opener would recover into the new main. Nothing is
// ever copied; a capture directory on another filesystem is refused.
// moved lists the new paths; err joins every sidecar left in place.
//
// In a directory without the name free (a final capture that already has
// its copy), the original goes in as <db>-wal.quarantined.
func QuarantineSidecars(dbPath, captureDir string, want map[string]fileid.ID) (moved []string, err error) {
	return QuarantineSidecarsIn(dbPath, store.DirID{}, captureDir, want)
}

// QuarantineSidecarsIn is QuarantineSidecars for a store whose directory
// discovery recorded as dir (zero: not compared): the directory is the
// one reached without a symlink and must be that inode and owner, so a
// look-alike directory put at the path (with hard links to the recorded
// sidecars in it) is refused; a capture directory inside the store's
// directory is opened from its handle, never by name.
func QuarantineSidecarsIn(dbPath string, dir store.DirID, captureDir string, want map[string]fileid.ID) (moved []string, err error) {
	if !filepath.IsAbs(dbPath) {
		return nil, fmt.Errorf("quarantine: store path %q is not absolute", dbPath)
	}
	dbPath = filepath.Clean(dbPath)
	base := filepath.Base(dbPath)
	store, err := openStoreDir(filepath.Dir(dbPath), dir)
	if err != nil {
		return nil, fmt.Errorf("quarantine sidecars of %s: %w", dbPath, err)
	}
	defer store.close()
	if !strings.HasPrefix(filepath.Base(captureDir), base+retiredInfix) {
		return nil, fmt.Errorf("quarantine sidecars of %s: %s is not a capture directory of this store", dbPath, captureDir)
	}
	var dst capDir
	if filepath.Dir(filepath.Clean(captureDir)) == store.path {
		dst, err = store.openChildDir(filepath.Base(captureDir))
	} else {
		dst, err = openStorePath(captureDir)
	}
	if err != nil {
		return nil, fmt.Errorf("quarantine sidecars of %s: %w", dbPath, err)
	}
	defer dst.close()
	var sst, dstst unix.Stat_t
	if err := unix.Fstat(store.fd, &sst); err != nil {
		return nil, fmt.Errorf("stat %s: %w", store.path, err)
	}
	if err := unix.Fstat(dst.fd, &dstst); err != nil {
		return nil, fmt.Errorf("stat %s: %w", dst.path, err)
	}
	if sst.Dev != dstst.Dev {
		return nil, fmt.Errorf("quarantine sidecars of %s: %s is on another filesystem; sidecars are only ever renamed, never copied: stage the capture next to the store", dbPath, captureDir)
	}
	var errs []error
	for _, sfx := range []string{"-wal", "-shm"} {
		w, ok := want[sfx]
		if !ok {
			continue
		}
		target, err := quarantineOne(store, dst, base+sfx, w)
		if err != nil {
			errs = append(errs, err)
		}
		if target != "" {
			moved = append(moved, dst.join(target))
		}
	}
	if len(moved) > 0 {
		if err := dst.sync(); err != nil {
			errs = append(errs, err)
		}
		if err := store.sync(); err != nil {
			errs = append(errs, err)
		}
	}
	return moved, errors.Join(errs...)
}

// quarantineOne moves name from store into dst if it is still want. It
// returns the name in dst when moved; a missing sidecar is no error.
func quarantineOne(store, dst capDir, name string, want fileid.ID) (string, error) {
	st, err := store.lstat(name)
	if errors.Is(err, unix.ENOENT) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("stat %s: %w", store.join(name), err)
	}
	if !isRegular(&st) {
		return "", fmt.Errorf("%w: %s is not a regular file; left in place", fileid.ErrIdentityChanged, store.join(name))
	}
	if got := fileid.FromStat(&st); got != want {
		return "", fmt.Errorf("%w: %s is %s, not the old generation's %s; left in place", fileid.ErrIdentityChanged, store.join(name), got, want)
	}
	if err := store.verify(); err != nil {
		return "", err
	}
	for _, target := range []string{name, name + ".quarantined"} {
		// Recorded before the rename, so a crash right after it still
		// tells CleanPartials this directory holds an original.
		if err := appendQuarantineList(dst, target, want); err != nil {
			return "", err
		}
		err := renameNoReplace(store.fd, name, dst.fd, target)
		if isExist(err) {
			continue
		}
		if errors.Is(err, unix.ENOENT) {
			return "", nil // gone between the check and the rename
		}
		if err != nil {
			return "", fmt.Errorf("rename %s to %s: %w", store.join(name), dst.join(target), err)
		}
		moved, err := dst.lstat(target)
		if err != nil {
			return target, fmt.Errorf("stat quarantined %s: %w", dst.join(target), err)
		}
		if got := fileid.FromStat(&moved); got != want {
			if rerr := renameNoReplace(dst.fd, target, store.fd, name); rerr != nil {
				return target, fmt.Errorf("%w: %s was replaced by %s between the check and the rename; it is now %s and could not be put back: %v", fileid.ErrIdentityChanged, store.join(name), got, dst.join(target), rerr)
			}
			return "", fmt.Errorf("%w: %s was replaced by %s between the check and the rename; put back", fileid.ErrIdentityChanged, store.join(name), got)
		}
		return target, nil
	}
	return "", fmt.Errorf("quarantine %s: %s and %s.quarantined both exist in %s", store.join(name), name, name, dst.path)
}

func appendQuarantineList(d capDir, name string, id fileid.ID) error {
	fd, err := unix.Openat(d.fd, quarantineList, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("record quarantine in %s: %w", d.path, err)
	}
	f := os.NewFile(uintptr(fd), d.join(quarantineList))
	_, err = fmt.Fprintf(f, "%s\t%s\n", name, id)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("record quarantine in %s: %w", d.join(quarantineList), err)
	}
	return nil
}

// holdsQuarantined reports whether d holds an original a quarantine moved in.
func holdsQuarantined(d capDir) bool {
	f, err := openatRegular(d, quarantineList)
	if errors.Is(err, unix.ENOENT) {
		return false
	}
	if err != nil {
		return true // cannot tell: keep it
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		name, _, _ := strings.Cut(sc.Text(), "\t")
		if name != "" && name == filepath.Base(name) && d.exists(name) {
			return true
		}
	}
	return sc.Err() != nil
}

// CleanPartials removes the staging directories an interrupted capture of
// dbPath left behind (<db>.retired-wal-*.partial), but only stateguard's
// (they carry its marker) whose agent is gone, and never one that holds a
// quarantined original. Hermes' staging directories and anything unknown
// are left alone. The caller runs it when it resumes, before capturing.
// log gets what was removed or kept (nil: slog.Default()). The store's
// directory is reached through a handle (no symlink in its path; the one
// discovery recorded when want is set), and everything under it is
// listed, checked and removed relative to that handle's fd.
func CleanPartials(dbPath string, want store.DirID, log *slog.Logger) (removed []string, err error) {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("subsystem", "recovery")
	dbPath = filepath.Clean(dbPath)
	base := filepath.Base(dbPath)
	sd, err := openStoreDir(filepath.Dir(dbPath), want)
	if err != nil {
		return nil, fmt.Errorf("clean partial captures of %s: %w", dbPath, err)
	}
	defer sd.close()
	entries, err := sd.readDir()
	if err != nil {
		return nil, fmt.Errorf("clean partial captures of %s: %w", dbPath, err)
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, base+retiredInfix) || !strings.HasSuffix(name, partialSuffix) {
			continue
		}
		ok, why, err := removePartial(sd, name)
		switch {
		case err != nil:
			errs = append(errs, err)
		case ok:
			removed = append(removed, sd.join(name))
			log.Info("removed an interrupted capture's staging directory", "path", sd.join(name))
		case why != "":
			log.Info("kept a staging directory", "path", sd.join(name), "reason", why)
		}
	}
	if len(removed) > 0 {
		if err := sd.sync(); err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// removePartial removes one staging directory if it is stale and ours.
func removePartial(store capDir, name string) (removed bool, why string, err error) {
	if st, err := store.lstat(name); err != nil || !isDir(&st) {
		return false, "", nil
	}
	d, err := store.openChildDir(name)
	if err != nil {
		return false, "", err
	}
	defer d.close()
	mf, err := openatRegular(d, partialMarker)
	if err != nil {
		return false, "no stateguard marker: not ours", nil
	}
	b, rerr := io.ReadAll(io.LimitReader(mf, 64<<10))
	mf.Close()
	var mark partialMark
	if rerr != nil || json.Unmarshal(bytes.TrimSpace(b), &mark) != nil {
		return false, "unreadable stateguard marker", nil
	}
	if mark.AgentPID == os.Getpid() || processAlive(mark.AgentPID) {
		return false, fmt.Sprintf("its agent (pid %d) is alive: capture in progress", mark.AgentPID), nil
	}
	if holdsQuarantined(d) {
		return false, "holds quarantined sidecars, which exist nowhere else: finish the capture or move them by hand", nil
	}
	entries, err := d.readDir()
	if err != nil {
		return false, "", err
	}
	for _, e := range entries {
		if st, err := d.lstat(e.Name()); err != nil || isDir(&st) {
			return false, "holds a subdirectory: not a shape stateguard writes", nil
		}
	}
	for _, e := range entries {
		if err := unix.Unlinkat(d.fd, e.Name(), 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return false, "", fmt.Errorf("remove %s: %w", d.join(e.Name()), err)
		}
	}
	if err := unix.Unlinkat(store.fd, name, unix.AT_REMOVEDIR); err != nil {
		return false, "", fmt.Errorf("remove %s: %w", store.join(name), err)
	}
	return true, "", nil
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
