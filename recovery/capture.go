//go:build unix

package recovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/store"
)

// Incident kinds, as recorded in the manifest's stateguard.kind.
const (
	KindReplaced    = "replaced"
	KindSidecarLost = "sidecar_lost"
	KindMispaired   = "mispaired"
	// KindRewritten: the main was rewritten in place (cp, rsync
	// --inplace); the capture's WAL fits no main any more.
	KindRewritten = "rewritten"
)

const (
	retiredInfix   = ".retired-wal-"
	partialSuffix  = ".partial"
	partialMarker  = ".stateguard-partial"    // in a staging dir: it is ours
	quarantineList = ".stateguard-quarantine" // in a staging dir: originals renamed into it
	// manifestSlack is what the manifest and directory entries may need on
	// top of the files' bytes.
	manifestSlack = 64 << 10
	// freeReserve is left free on the store's filesystem: a capture must
	// not take the last bytes the live store's writer needs.
	freeReserve = 1 << 20
)

// BudgetError is a capture refused before anything was written because
// it needs more than its budget: capture.max_bytes, or by default half the
// free space of the store's filesystem. It is an ErrNoSpace.
type BudgetError struct {
	Store, Dir   string
	Need, Budget int64
	Free         int64 // free bytes on the filesystem, -1 when unknown
	Configured   bool  // Budget is capture.max_bytes, not the default
}

func (e *BudgetError) Error() string {
	what := fmt.Sprintf("the default budget of half the free space (%d of %d bytes free)", e.Budget, e.Free)
	hint := "free space there (older captures can go once replayed), or set capture.max_bytes"
	if e.Configured {
		what = fmt.Sprintf("the capture.max_bytes budget of %d bytes", e.Budget)
		hint = "raise capture.max_bytes or free older captures"
	}
	return fmt.Sprintf("%v: capture of %s needs %d bytes in %s, over %s: %s; the orphan stays pinned",
		ErrNoSpace, e.Store, e.Need, e.Dir, what, hint)
}

func (e *BudgetError) Unwrap() error { return ErrNoSpace }

// ErrNoSpace marks a capture that does not fit its budget or the disk.
// Nothing is left behind; the caller keeps the orphan pinned and alerts.
var ErrNoSpace = errors.New("no space for the capture")

// Owner is the uid and gid a capture's directory and files are given.
type Owner struct{ UID, GID int }

// CaptureSource is what a capture is copied from. The fds are pinned
// read-only by the caller (through /proc/<pid>/fd on Linux); the capture
// only preads them and never closes, moves or truncates them.
type CaptureSource struct {
	// Main, WAL, SHM are the orphan generation's files. Any may be nil,
	// except WAL for the sidecar kinds, where it is the point of the
	// capture (for mispaired it may instead be a quarantined -wal already
	// in the staging directory).
	Main, WAL, SHM *os.File
	// MainSnapshot is the path of a main snapshot SnapshotMain took
	// earlier (sidecar_lost); it is used instead of Main, hard-linked into
	// the capture when it is on the same filesystem. The caller removes it
	// after a successful capture.
	MainSnapshot string
}

// CaptureRequest says where a capture goes and what it records.
type CaptureRequest struct {
	// DBPath is the store's state.db path; the capture directory is
	// created next to it.
	DBPath string
	// PID is the orphan's holder, the <pid> of the directory name and the
	// manifest's pid (Hermes' doctor finds a pid's capture by it).
	PID     int
	Trigger string // manifest trigger; default "stateguard:<kind>"
	// IncidentID and Kind go into the stateguard object.
	IncidentID, Kind string
	// Owner of the capture; nil means the owner Dir records, else the
	// owner of the store file, or of its directory when the file is gone.
	Owner *Owner
	// Dir is the store directory as discovery recorded it: the capture is
	// refused (store.DirChangedError) unless the directory is still that
	// inode and owner. Zero: reached without symlinks, not compared.
	Dir store.DirID
	// MaxBytes is the capture's budget; 0 means unlimited.
	MaxBytes int64
	// Supersedes is the size of an earlier capture of the same incident
	// that this one replaces (removed once it is written): the default
	// budget counts it as free space. The free space itself must still
	// hold the new capture.
	Supersedes int64
	Now        time.Time // names the directory; zero means time.Now()
	// Staging is a directory StageCapture made for this capture (mispaired:
	// it holds the quarantined sidecars); empty means a new one.
	Staging string
	Logger  *slog.Logger // nil: slog.Default()
}

// Capture is a written capture.
type Capture struct {
	Dir      string
	Manifest *Manifest
	// Bytes is the size of the capture's files (what an operator sees).
	Bytes int64
	// Reflinked is true when every file written as a copy was a clone.
	Reflinked bool
	// MainHeaderOnly: the main was over MainImageMaxBytes and only its
	// header was kept, so the capture alone cannot be opened.
	MainHeaderOnly bool
}

func (r *CaptureRequest) logger() *slog.Logger {
	l := r.Logger
	if l == nil {
		l = slog.Default()
	}
	return l.With("subsystem", "recovery")
}

func (r *CaptureRequest) check() error {
	if r.DBPath == "" || !filepath.IsAbs(r.DBPath) {
		return fmt.Errorf("capture: store path %q is not absolute", r.DBPath)
	}
	r.DBPath = filepath.Clean(r.DBPath)
	if r.PID <= 0 {
		return fmt.Errorf("capture of %s: holder pid %d is not a pid", r.DBPath, r.PID)
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	if r.Trigger == "" {
		r.Trigger = "stateguard"
		if r.Kind != "" {
			r.Trigger += ":" + r.Kind
		}
	}
	return nil
}

// openStore opens the store's directory for writing a capture next to it,
// refusing a symlinked store file or directory and a directory others may
// write to. owner resolves a nil req.Owner.
func openStore(req *CaptureRequest) (d capDir, base string, owner Owner, err error) {
	d, err = openStoreDir(filepath.Dir(req.DBPath), req.Dir)
	if err != nil {
		return capDir{}, "", Owner{}, fmt.Errorf("capture of %s: %w", req.DBPath, err)
	}
	base = filepath.Base(req.DBPath)
	st, err := d.lstat(base)
	switch {
	case err == nil && isSymlink(&st):
		d.close()
		return capDir{}, "", Owner{}, fmt.Errorf("capture of %s: %w: the store file is a symlink; configure the store by its real path", req.DBPath, ErrUnsafeDir)
	case err != nil && !errors.Is(err, unix.ENOENT):
		d.close()
		return capDir{}, "", Owner{}, fmt.Errorf("capture of %s: stat store: %w", req.DBPath, err)
	case err != nil:
		if err := unix.Fstat(d.fd, &st); err != nil {
			d.close()
			return capDir{}, "", Owner{}, fmt.Errorf("capture of %s: stat %s: %w", req.DBPath, d.path, err)
		}
	}
	owner = Owner{UID: int(st.Uid), GID: int(st.Gid)}
	if !req.Dir.IsZero() {
		owner = Owner{UID: req.Dir.UID, GID: req.Dir.GID}
	}
	if req.Owner != nil {
		owner = *req.Owner
	}
	return d, base, owner, nil
}

// captureStem is <db>.retired-wal-<UTC YYYYmmdd-HHMMSS>-<pid>.
func captureStem(base string, now time.Time, pid int) string {
	return fmt.Sprintf("%s%s%s-%d", base, retiredInfix, now.UTC().Format("20060102-150405"), pid)
}

type partialMark struct {
	AgentPID   int    `json:"agent_pid"`
	Database   string `json:"database"`
	IncidentID string `json:"incident_id,omitempty"`
	CreatedAt  string `json:"created_at"`
}

// stage creates <stem>[-n].partial in store with its marker, picking the
// first n for which neither the final nor the staging name exists.
func stage(store capDir, req *CaptureRequest, base string, owner Owner) (name string, d capDir, err error) {
	stem := captureStem(base, req.Now, req.PID)
	for n := 0; n < 1000; n++ {
		final := stem
		if n > 0 {
			final = fmt.Sprintf("%s-%d", stem, n)
		}
		if store.exists(final) {
			continue
		}
		d, err = store.mkdir(final+partialSuffix, owner)
		if isExist(err) {
			continue
		}
		if err != nil {
			return "", capDir{}, fmt.Errorf("create capture directory %s: %w", store.join(final+partialSuffix), err)
		}
		name = final + partialSuffix
		mark, _ := json.Marshal(partialMark{AgentPID: os.Getpid(), Database: req.DBPath, IncidentID: req.IncidentID, CreatedAt: time.Now().UTC().Format(time.RFC3339)})
		f, err := d.createExcl(partialMarker, owner)
		if err == nil {
			_, err = f.Write(mark)
			if err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err == nil {
			err = d.sync()
		}
		if err == nil {
			err = store.sync()
		}
		if err != nil {
			_ = unix.Unlinkat(d.fd, partialMarker, 0)
			d.close()
			_ = unix.Unlinkat(store.fd, name, unix.AT_REMOVEDIR)
			return "", capDir{}, fmt.Errorf("stage capture %s: %w", store.join(name), err)
		}
		return name, d, nil
	}
	return "", capDir{}, fmt.Errorf("stage capture for %s: 1000 directories named %s[-n] exist; remove old captures", req.DBPath, store.join(stem))
}

// StageCapture creates the staging directory of a capture now, before
// anything is copied, so QuarantineSidecars can move a mispaired store's
// foreign sidecars into it at once; WriteCapture with req.Staging set
// finishes it later. The directory is next to req.DBPath, named like the
// final capture plus ".partial", mode 0700, with stateguard's marker.
func StageCapture(req CaptureRequest) (string, error) {
	if err := req.check(); err != nil {
		return "", err
	}
	store, base, owner, err := openStore(&req)
	if err != nil {
		return "", err
	}
	defer store.close()
	name, d, err := stage(store, &req, base, owner)
	if err != nil {
		return "", err
	}
	d.close()
	return store.join(name), nil
}

// openStaging opens a directory StageCapture made for req.
func openStaging(store capDir, req *CaptureRequest, base string) (string, capDir, error) {
	name := filepath.Base(req.Staging)
	if filepath.Clean(filepath.Dir(req.Staging)) != store.path || !strings.HasPrefix(name, base+retiredInfix) || !strings.HasSuffix(name, partialSuffix) {
		return "", capDir{}, fmt.Errorf("capture of %s: %s is not a staging directory of this store", req.DBPath, req.Staging)
	}
	d, err := store.openChildDir(name)
	if err != nil {
		return "", capDir{}, fmt.Errorf("capture of %s: %w", req.DBPath, err)
	}
	if st, err := d.lstat(partialMarker); err != nil || !isRegular(&st) {
		d.close()
		return "", capDir{}, fmt.Errorf("capture of %s: %s has no stateguard marker: not ours to finish", req.DBPath, req.Staging)
	}
	return name, d, nil
}
