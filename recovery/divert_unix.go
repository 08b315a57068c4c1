//go:build unix

package recovery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/store"
)

// Divert writes the rows a capture holds and the healthy store lacks as
// Hermes-format diverted JSONL, one file per session, under
// <profile home>/sessions/recovered/<incident-id>/ (pre-replacement/ for
// the rows a restore rolled back, KindReplaced only).
//
// The capture is never opened with SQLite: a private copy is, so SQLite
// may recover its WAL there. The healthy store is read read-only, in one
// read transaction. Which rows are missing: see diffCapture.
//
// The incident directory is built under a staging name and renamed into
// place whole, after every file and divert.json are fsynced, so a crash
// leaves either nothing or a complete divert. Re-running Divert for an
// incident that has one returns its report (Existing set) and writes
// nothing; one made with another kind or replacement time is refused
// with ErrDivertMismatch.
func Divert(ctx context.Context, req DivertRequest) (DivertReport, error) {
	return divertWith(ctx, req, diffWithCopy)
}

// divertWith is Divert with the rows missing from the healthy store found
// by diff.
func divertWith(ctx context.Context, req DivertRequest, diff func(context.Context, *DivertRequest) ([]sessionDiff, error)) (DivertReport, error) {
	if err := req.check(); err != nil {
		return DivertReport{}, err
	}
	log := req.logger()
	owner, err := divertOwner(&req)
	if err != nil {
		return DivertReport{}, err
	}
	recovered, err := openRecoveredDir(req.ProfileHome, req.Dir, owner)
	if err != nil {
		return DivertReport{}, fmt.Errorf("divert %s: %w", req.IncidentID, err)
	}
	defer recovered.close()
	final := recovered.join(req.IncidentID)
	if recovered.exists(req.IncidentID) {
		rep, err := existingDivert(recovered, &req)
		if err == nil {
			log.Debug("divert already written", "incident", req.IncidentID, "dir", final)
		}
		return rep, err
	}

	rep := DivertReport{IncidentID: req.IncidentID, Kind: req.Kind, ReplacedAt: req.ReplacedAt,
		Cut: req.Cut, Capture: req.Capture, Store: req.Store, Dir: final}
	if req.queued, err = queuedRows(ctx, &req, recovered); err != nil {
		return DivertReport{}, fmt.Errorf("divert %s: %w", req.IncidentID, err)
	}
	addHermesLines(&req)
	diffs, err := diff(ctx, &req)
	if err != nil {
		return DivertReport{}, fmt.Errorf("divert %s: %w", req.IncidentID, err)
	}
	rep.CutNote = req.cutNote
	if err := writeDivert(ctx, log, recovered, &rep, diffs, owner); err != nil {
		if errors.Is(err, errDivertRaced) {
			return existingDivert(recovered, &req)
		}
		return DivertReport{}, fmt.Errorf("divert %s: %w", req.IncidentID, err)
	}
	log.Debug("divert written", "incident", req.IncidentID, "dir", final, "files", len(rep.Files),
		"replay_rows", rep.ReplayRows, "pre_replacement_rows", rep.PreReplacementRows)
	return rep, nil
}

// divertOwner is req.Owner, else the owner of the store file.
func divertOwner(req *DivertRequest) (Owner, error) {
	if req.Owner != nil {
		return *req.Owner, nil
	}
	if !req.Dir.IsZero() {
		return Owner{UID: req.Dir.UID, GID: req.Dir.GID}, nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(req.Store, &st); err != nil {
		return Owner{}, fmt.Errorf("divert %s: stat store %s: %w", req.IncidentID, req.Store, err)
	}
	if !isRegular(&st) {
		return Owner{}, fmt.Errorf("divert %s: store %s is not a regular file (symlinks are not followed): %w", req.IncidentID, req.Store, store.ErrNotRegular)
	}
	return Owner{UID: int(st.Uid), GID: int(st.Gid)}, nil
}

// diffWithCopy makes the capture's private copy, diffs it against the
// healthy store, and removes the copy.
func diffWithCopy(ctx context.Context, req *DivertRequest) ([]sessionDiff, error) {
	tmp := req.TmpDir
	if tmp == "" {
		tmp = os.TempDir()
	}
	if err := checkPreviousGeneration(ctx, req); err != nil {
		return nil, err
	}
	copyPath, err := privateCopy(ctx, req.Capture, tmp)
	if errors.Is(err, ErrNoMainImage) {
		// Nothing to pair the WAL with: its page images are all there is
		// (a mispaired store whose renamed-over main nobody held).
		return nil, fmt.Errorf("%w: %v (its rows are read from the WAL's page images instead)", ErrCaptureUnpaired, err)
	}
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(filepath.Dir(copyPath))

	// The state at the frame cut is read first, from a second copy: the
	// first is about to be opened, and SQLite may checkpoint it.
	cut, err := chooseCut(ctx, req, copyPath, tmp)
	if err != nil {
		return nil, err
	}
	capDB, err := sql.Open("sqlite", privateCopyDSN(copyPath))
	if err != nil {
		return nil, fmt.Errorf("open private copy %s: %w", copyPath, err)
	}
	defer capDB.Close()
	capDB.SetMaxOpenConns(1)
	capTx, err := capDB.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("open private copy %s of %s: %w", copyPath, req.Capture, err)
	}
	defer capTx.Rollback()
	if err := checkPaired(ctx, capTx, req.Capture); err != nil {
		return nil, err
	}

	healthy, err := healthyStore(req).OpenReadOnly()
	if err != nil {
		return nil, err
	}
	defer healthy.Close()
	// One read transaction: every session is compared against the same
	// snapshot while Hermes goes on writing.
	hTx, err := healthy.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", req.Store, err)
	}
	defer hTx.Rollback()

	return diffCapture(ctx, capTx, hTx, cut, req.queued)
}

// healthyStore is the request's store, to be opened through a handle on
// its directory: the one discovery recorded (req.Dir) when the store lives
// in the profile directory, else reached without a symlink.
func healthyStore(req *DivertRequest) store.Store {
	st := store.Store{Path: req.Store, Kind: store.Hermes}
	if filepath.Dir(req.Store) == filepath.Clean(req.ProfileHome) {
		st.DirID = req.Dir
	}
	return st
}

// chooseCut is the rule that splits a replaced store's missing rows: the
// frame cut when the request has one the capture can show, else the
// replacement time.
func chooseCut(ctx context.Context, req *DivertRequest, copyPath, tmp string) (replayCut, error) {
	if req.Kind != KindReplaced && req.Kind != KindMispaired && req.Kind != KindRewritten {
		return replayCut{}, nil
	}
	if req.Cut == nil {
		req.cutNote = "timestamps: no wal position was recorded"
		return replayCut{at: req.ReplacedAt}, nil
	}
	rows, why, err := rowsAtCut(ctx, req, copyPath, tmp)
	if err != nil {
		return replayCut{}, err
	}
	if rows == nil {
		req.cutNote = "timestamps: " + why
		return replayCut{at: req.ReplacedAt}, nil
	}
	req.cutNote = "wal " + req.Cut.String()
	return replayCut{at: req.Cut.At, atFrame: rows}, nil
}

// privateCopyDSN opens our own copy writable: SQLite must be able to
// recover the WAL into it. Nothing else ever opens it.
func privateCopyDSN(path string) string {
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	return "file:" + esc + "?mode=rw&_pragma=busy_timeout(5000)"
}

// openRecoveredDir opens <home>/sessions/recovered, creating the missing
// ones 0700 for owner. The home, sessions and recovered must not be
// symlinks nor writable by others.
func openRecoveredDir(home string, want store.DirID, owner Owner) (capDir, error) {
	h, err := openStoreDir(home, want)
	if err != nil {
		return capDir{}, err
	}
	defer h.close()
	sessions, err := openOrMakeDir(h, divertSessionsDir, owner)
	if err != nil {
		return capDir{}, err
	}
	defer sessions.close()
	return openOrMakeDir(sessions, divertRecoveredDir, owner)
}

// openOrMakeDir opens the directory name in d without following a
// symlink, creating it (0700, owner) when missing, and refuses one that
// others may write to.
func openOrMakeDir(d capDir, name string, owner Owner) (capDir, error) {
	for range 2 {
		sub, err := d.openChildDir(name)
		switch {
		case err == nil:
			var st unix.Stat_t
			if err := unix.Fstat(sub.fd, &st); err != nil {
				sub.close()
				return capDir{}, fmt.Errorf("stat directory %s: %w", sub.path, err)
			}
			if st.Mode&0o002 != 0 {
				sub.close()
				return capDir{}, fmt.Errorf("%w: %s is writable by others (mode %#o): fix it with \"chmod o-w %s\" and retry", ErrUnsafeDir, sub.path, st.Mode&0o7777, sub.path)
			}
			return sub, nil
		case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
			if st, lerr := d.lstat(name); lerr == nil && isSymlink(&st) {
				return capDir{}, fmt.Errorf("%w: %s is a symlink: stateguard writes diverted rows only into a real directory; replace the link with a directory", ErrUnsafeDir, d.join(name))
			}
			return capDir{}, fmt.Errorf("%w: %s is not a directory", ErrUnsafeDir, d.join(name))
		case !errors.Is(err, unix.ENOENT):
			return capDir{}, err
		}
		sub, err = d.mkdir(name, owner)
		if err == nil {
			if err := d.sync(); err != nil {
				sub.close()
				return capDir{}, err
			}
			return sub, nil
		}
		if !isExist(err) {
			return capDir{}, fmt.Errorf("create directory %s: %w", d.join(name), err)
		}
		// Created by someone else meanwhile: open theirs.
	}
	return capDir{}, fmt.Errorf("open directory %s: it keeps appearing and disappearing", d.join(name))
}

// existingDivert reads the divert published in recovered, through its
// handle (never by name), checks its files and that it was made for the
// same kind and replacement time.
func existingDivert(recovered capDir, req *DivertRequest) (DivertReport, error) {
	dir := recovered.join(req.IncidentID)
	d, err := recovered.openChildDir(req.IncidentID)
	if err != nil {
		return DivertReport{}, fmt.Errorf("divert %s: read divert %s (symlinks are not followed): %w", req.IncidentID, dir, err)
	}
	defer d.close()
	rep, err := readDivertIn(d)
	if err != nil {
		return DivertReport{}, fmt.Errorf("divert %s: %w", req.IncidentID, err)
	}
	if rep.Kind != req.Kind || !rep.ReplacedAt.Equal(req.ReplacedAt) {
		return DivertReport{}, fmt.Errorf("divert %s: %w: %s holds a %s divert (replaced at %v), asked for %s (replaced at %v); remove that directory to divert again",
			req.IncidentID, ErrDivertMismatch, dir, rep.Kind, rep.ReplacedAt, req.Kind, req.ReplacedAt)
	}
	rep.Existing = true
	return rep, nil
}
