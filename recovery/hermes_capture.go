//go:build unix

package recovery

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stateguard/stateguard/store"
)

// Hermes captures a lost WAL generation itself (capture_retired_wal_generation,
// docs/hermes.md "Captures"): at the first write it refuses, or at close(),
// which agentd's SIGTERM runs. Its staging directory is the final name plus
// .partial, its files are written as <name>.part and renamed, its manifest
// last. So beside the incident's own capture the store can hold a second,
// finished capture of the same orphan, or a staging directory a freeze and
// a SIGKILL cut short. One capture per orphaned generation is kept: the
// incident's, which agentd took from the pinned inodes. The others are
// settled here, after the incident's capture is final and every writer
// that could still be writing one is gone.

// ForeignRequest names the incident's capture and the processes that may
// have left a Hermes capture of the same orphan.
type ForeignRequest struct {
	DBPath string
	Dir    store.DirID // the store directory as discovery recorded it
	// Capture is the incident's finished capture: the one kept.
	Capture string
	// Holders are the incident's writers, all gone: a staging directory
	// is only theirs when its name carries one of their pids.
	Holders []int
	// Alive reports whether a pid still runs; nil: kill(pid, 0).
	Alive func(pid int) bool
}

// ForeignCapture is one Hermes capture directory settled.
type ForeignCapture struct {
	Path string `json:"path"`
	PID  int    `json:"pid"`
	// Outcome: "duplicate_removed" (a finished capture whose WAL is the
	// incident's, byte for byte or a prefix), "partial_removed" (a staging
	// directory whose WAL bytes are a prefix of the incident's), or
	// "kept" (it holds bytes the incident's capture lacks, or could not
	// be read: never removed then).
	Outcome string `json:"outcome"`
	Why     string `json:"why,omitempty"`
}

// Outcomes of ForeignCapture.
const (
	ForeignDuplicateRemoved = "duplicate_removed"
	ForeignPartialRemoved   = "partial_removed"
	ForeignKept             = "kept"
)

// SettleForeignCaptures removes the Hermes captures of the incident's
// orphan that hold nothing the incident's capture lacks, and reports every
// Hermes capture of it it looked at. A capture of another generation, one
// of stateguard's own, or a staging directory of a process that is no
// gone holder is not touched. The store directory is reached through
// its handle (the one discovery recorded), a finished capture is checked
// through a no-symlink open of its path, and what is removed is removed
// relative to the directory's fd. It runs as the directory's owner, so
// it removes nothing the owner could not.
func SettleForeignCaptures(ctx context.Context, req ForeignRequest) ([]ForeignCapture, error) {
	if req.Alive == nil {
		req.Alive = processAlive
	}
	own, err := openCapture(ctx, filepath.Clean(req.Capture), false)
	if err != nil {
		return nil, fmt.Errorf("settle Hermes captures of %s: read the incident's capture: %w", req.DBPath, err)
	}
	if own.WAL == "" {
		return nil, nil // no WAL to tell a capture of the same generation by
	}
	ref, err := newWALRef(own)
	if err != nil {
		return nil, err
	}
	defer ref.f.Close()
	sd, err := openStoreDir(filepath.Dir(filepath.Clean(req.DBPath)), req.Dir)
	if err != nil {
		return nil, fmt.Errorf("settle Hermes captures of %s: %w", req.DBPath, err)
	}
	defer sd.close()
	entries, err := sd.readDir()
	if err != nil {
		return nil, fmt.Errorf("settle Hermes captures of %s: %w", req.DBPath, err)
	}
	base := filepath.Base(req.DBPath)
	var out []ForeignCapture
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, base+retiredInfix) || name == filepath.Base(own.Dir) {
			continue
		}
		var fc *ForeignCapture
		if strings.HasSuffix(name, partialSuffix) {
			fc, err = settlePartial(ctx, sd, name, base, ref, req)
		} else {
			fc, err = settleFinished(ctx, sd, name, ref)
		}
		if err != nil {
			errs = append(errs, err)
		}
		if fc != nil {
			out = append(out, *fc)
		}
	}
	if len(out) > 0 {
		if err := sd.sync(); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// walRef is the incident's captured WAL, which Hermes' copies are
// compared with.
type walRef struct {
	f    *os.File
	path string
	size int64
	id   *[2]uint64
}

func newWALRef(own *CaptureInfo) (*walRef, error) {
	f, err := own.open(own.WAL)
	if err != nil {
		return nil, fmt.Errorf("open the incident's captured WAL %s: %w", own.WAL, err)
	}
	st, err := fstatFile(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", own.WAL, err)
	}
	r := &walRef{f: f, path: own.WAL, size: st.Size}
	if id := own.Manifest.WAL.Identity; id != nil {
		r.id = &[2]uint64{id.Dev, id.Ino}
	}
	return r, nil
}

// holds reports whether the first size bytes of the incident's WAL hash
// to sum: a copy of that many bytes holds nothing the incident's lacks.
func (r *walRef) holds(ctx context.Context, size int64, sum string) (bool, error) {
	if size > r.size {
		return false, nil
	}
	got, _, err := hashRange(ctx, r.f, r.path, size)
	if err != nil {
		return false, err
	}
	return strings.EqualFold(got, sum), nil
}

// settleFinished removes a finished Hermes capture whose WAL is the
// incident's orphan (same identity in its manifest) and holds no byte the
// incident's capture lacks, after checking its files against its manifest.
func settleFinished(ctx context.Context, sd capDir, name string, ref *walRef) (*ForeignCapture, error) {
	info, err := openCapture(ctx, sd.join(name), true)
	if err != nil || info.Producer != "hermes" || info.Manifest.WAL == nil || info.Manifest.WAL.Identity == nil || ref.id == nil {
		return nil, nil // unreadable, ours, or not known to be this generation: not ours to judge
	}
	if id := info.Manifest.WAL.Identity; [2]uint64{id.Dev, id.Ino} != *ref.id {
		return nil, nil
	}
	fc := &ForeignCapture{Path: sd.join(name), PID: info.Manifest.PID}
	same, err := ref.holds(ctx, info.Manifest.WAL.Bytes, info.Manifest.WAL.SHA256)
	switch {
	case err != nil:
		fc.Outcome, fc.Why = ForeignKept, "could not compare it with the incident's capture: "+err.Error()
		return fc, nil
	case !same:
		fc.Outcome, fc.Why = ForeignKept, "its WAL holds bytes the incident's capture lacks"
		return fc, nil
	}
	if err := sd.removeAll(name); err != nil {
		return nil, err
	}
	fc.Outcome, fc.Why = ForeignDuplicateRemoved, "its WAL is the incident's capture's, byte for byte"
	return fc, nil
}

// settlePartial removes the staging directory a Hermes capture left when
// its process was frozen and killed inside it: the name must carry the
// pid of one of the incident's gone writers, and every WAL file in it
// (state.db-wal or its .part) must be a prefix of the incident's WAL.
// The other files are copies of a main and a wal-index that exist in the
// incident's capture or at the path.
func settlePartial(ctx context.Context, sd capDir, name, base string, ref *walRef, req ForeignRequest) (*ForeignCapture, error) {
	pid := capturePID(name, base)
	if pid <= 0 || !containsPID(req.Holders, pid) || req.Alive(pid) {
		return nil, nil
	}
	d, err := sd.openChildDir(name)
	if err != nil {
		return nil, nil
	}
	defer d.close()
	if d.exists(partialMarker) {
		return nil, nil // stateguard's own: CleanPartials' to judge
	}
	fc := &ForeignCapture{Path: sd.join(name), PID: pid, Outcome: ForeignKept}
	entries, err := d.readDir()
	if err != nil {
		fc.Why = "could not list it: " + err.Error()
		return fc, nil
	}
	for _, e := range entries {
		st, err := d.lstat(e.Name())
		if err != nil || !isRegular(&st) {
			fc.Why = e.Name() + " is not a regular file: not a shape Hermes writes"
			return fc, nil
		}
		if !strings.HasPrefix(e.Name(), base+"-wal") {
			continue
		}
		if ok, why := partialWALHeld(ctx, d, e.Name(), st.Size, ref); !ok {
			fc.Why = why
			return fc, nil
		}
	}
	if err := sd.removeAll(name); err != nil {
		return nil, err
	}
	fc.Outcome, fc.Why = ForeignPartialRemoved, "an interrupted Hermes capture; its WAL bytes are in the incident's capture"
	return fc, nil
}

func partialWALHeld(ctx context.Context, d capDir, name string, size int64, ref *walRef) (bool, string) {
	f, err := openatRegular(d, name)
	if err != nil {
		return false, "could not read " + name + ": " + err.Error()
	}
	defer f.Close()
	sum, _, err := hashRange(ctx, f, d.join(name), size)
	if err != nil {
		return false, "could not read " + name + ": " + err.Error()
	}
	if ok, err := ref.holds(ctx, size, sum); err != nil || !ok {
		return false, name + " holds WAL bytes the incident's capture lacks"
	}
	return true, ""
}

// capturePID reads <pid> from <base>.retired-wal-<YYYYmmdd>-<HHMMSS>-<pid>[-n][.partial].
func capturePID(name, base string) int {
	rest := strings.TrimSuffix(strings.TrimPrefix(name, base+retiredInfix), partialSuffix)
	parts := strings.Split(rest, "-")
	if len(parts) < 3 {
		return 0
	}
	pid, err := strconv.Atoi(parts[2])
	if err != nil {
		return 0
	}
	return pid
}

func containsPID(pids []int, pid int) bool {
	for _, p := range pids {
		if p == pid {
			return true
		}
	}
	return false
}
