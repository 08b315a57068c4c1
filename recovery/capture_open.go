//go:build unix

package recovery

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/store"
)

// ErrCaptureDamaged marks a capture whose files do not match its manifest
// (truncated, changed, missing) or that was never finished.
var ErrCaptureDamaged = errors.New("capture damaged")

// ErrMainHeaderOnly marks a capture that kept only the main's header (the
// main was over MainImageMaxBytes), so it cannot be opened on its own.
var ErrMainHeaderOnly = errors.New("capture holds only the main header")

// ErrNoMainImage marks a capture that holds no main at all (the sidecars
// of a main that was renamed over and that nobody held): only its WAL can
// be read, page image by page image (DivertWALImages).
var ErrNoMainImage = errors.New("capture holds no main image")

// CaptureInfo is a validated capture directory, written by stateguard or
// by Hermes.
type CaptureInfo struct {
	Dir      string
	Manifest *Manifest
	Producer string // "stateguard" or "hermes"
	// Paths of the capture's files; empty when the capture has none.
	Main, WAL, SHM string
	// MainHeaderOnly: Main is the 100-byte header <db>.header.
	MainHeaderOnly bool
	// dirID is the capture directory as it was opened (no symlink in any
	// component); the files are read again only through a handle that is
	// still that directory (open).
	dirID store.DirID
}

// open opens the capture file at path (one of Main, WAL, SHM) through a
// handle on the capture directory that must still be the one validated:
// no symlink in any component, the same inode and owner. A directory
// swapped since OpenCapture is refused, not read.
func (c *CaptureInfo) open(path string) (*os.File, error) {
	return openInDir(path, c.dirID)
}

// openInDir opens the regular file at path through a handle on its
// directory (store.OpenDir with want: no symlink in any component; when
// want is set, that directory).
func openInDir(path string, want store.DirID) (*os.File, error) {
	h, err := store.OpenDir(filepath.Dir(path), want)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return h.OpenFile(filepath.Base(path))
}

// OpenCapture validates a capture directory an operator named: manifest
// present and parseable, every file it names present as a regular file,
// sizes and sha256 equal to the manifest's. A damaged capture gets an
// error wrapping ErrCaptureDamaged that names the file and what to do. It
// never opens the capture with SQLite; use PrivateCopy for that. The
// symlinks of the directory's path (not the directory itself) are
// resolved once, here; every later read goes through a handle on the
// directory found.
func OpenCapture(dir string) (*CaptureInfo, error) {
	dir, err := resolveCaptureDir(dir)
	if err != nil {
		return nil, err
	}
	return openCapture(context.Background(), dir, true)
}

// resolveCaptureDir resolves the symlinks of an operator's capture path
// up to its parent; the capture directory itself is never a link.
func resolveCaptureDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("open capture %s: %w", dir, err)
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", fmt.Errorf("open capture %s: %w (hint: check the path)", abs, err)
	}
	return filepath.Join(parent, filepath.Base(abs)), nil
}

// openCapture validates the capture at dir, an absolute path reached
// without any symlink (the agent's own record of where it wrote it, or an
// operator's path resolved once).
func openCapture(ctx context.Context, dir string, verify bool) (*CaptureInfo, error) {
	dir = filepath.Clean(dir)
	if strings.HasSuffix(dir, partialSuffix) {
		return nil, fmt.Errorf("%w: %s is a staging directory: the capture was never finished; if its orphan is still pinned, capture again, otherwise keep it for forensics", ErrCaptureDamaged, dir)
	}
	h, err := store.OpenDir(dir, store.DirID{})
	if err != nil {
		return nil, fmt.Errorf("open capture %s: %w (symlinks are not followed)", dir, err)
	}
	id := h.ID()
	h.Close()
	m, err := readManifestIn(dir, id)
	if err != nil {
		return nil, err
	}
	info := &CaptureInfo{Dir: dir, Manifest: m, Producer: "hermes", MainHeaderOnly: m.Main.HeaderOnly(), dirID: id}
	if m.Stateguard != nil {
		info.Producer = "stateguard"
	}
	for _, e := range m.files() {
		path := filepath.Join(dir, e.name)
		if err := checkCaptureFile(ctx, info, path, e, verify); err != nil {
			return nil, err
		}
		switch e.role {
		case "wal":
			info.WAL = path
		case "shm":
			info.SHM = path
		case "main":
			info.Main = path
		}
	}
	if info.MainHeaderOnly && m.Main.Bytes != sqliteHeaderBytes {
		return nil, fmt.Errorf("%w: %s: main header %s is %d bytes, a SQLite header is %d", ErrCaptureDamaged, dir, m.Main.File, m.Main.Bytes, sqliteHeaderBytes)
	}
	return info, nil
}

func damaged(path, what string) error {
	return fmt.Errorf("%w: %s %s: keep the directory and do not replay from it; if the orphan is still pinned capture it again, otherwise recover what a private copy still holds", ErrCaptureDamaged, path, what)
}

func checkCaptureFile(ctx context.Context, info *CaptureInfo, path string, e manifestEntry, verify bool) error {
	if info.Producer == "stateguard" && e.sha256 == "" && e.role != "shm" {
		// stateguard records a sum for every file it keeps; a missing one
		// would make the content check below (and copyVerified's) pass
		// without looking. Hermes' own manifests may lack the main's.
		return damaged(path, "has no sha256 in manifest.json (stateguard records one for every file it keeps), so its content cannot be verified")
	}
	f, err := info.open(path)
	if errors.Is(err, os.ErrNotExist) {
		return damaged(path, "is missing (manifest.json lists it as "+e.role+")")
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return damaged(path, "is a symlink")
		}
		if errors.Is(err, store.ErrNotRegular) {
			return damaged(path, "is not a regular file")
		}
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	st, err := fstatFile(f)
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if !isRegular(&st) {
		return damaged(path, "is not a regular file")
	}
	if st.Size != e.bytes {
		return damaged(path, fmt.Sprintf("is %d bytes, manifest.json says %d (truncated or changed after the capture)", st.Size, e.bytes))
	}
	// The -shm is not checked by content: it is the wal-index, a cache
	// SQLite rebuilds from the WAL, and a reader that mapped it before the
	// quarantine moved it into the capture still writes its read marks
	// there (a 1000-cycle seed 1 chaos run: a mispaired
	// capture's moved -shm was written 160 ms after the capture, by a
	// process the freeze leaves running, and seven incidents ended
	// unrecoverable on "changed after the capture").
	if verify && e.sha256 != "" && e.role != "shm" {
		sum, _, err := hashRange(ctx, f, path, e.bytes)
		if err != nil {
			return fmt.Errorf("hash %s: %w", path, err)
		}
		if !strings.EqualFold(sum, e.sha256) {
			return damaged(path, fmt.Sprintf("has sha256 %s, manifest.json says %s (changed after the capture)", sum, e.sha256))
		}
	}
	return nil
}

// PrivateCopy copies a capture's main and WAL into a new private directory
// (mode 0700) under tmpDir, checking each file against the manifest's
// sha256 while copying, and returns the copy's database path. SQLite may
// open that copy and run WAL recovery on it; the capture itself is never
// opened with SQLite. The -shm is not copied: SQLite rebuilds it from the
// WAL. The caller removes filepath.Dir(dbPath) when done. dir is an
// operator's path (resolved once, as OpenCapture does).
func PrivateCopy(ctx context.Context, dir, tmpDir string) (dbPath string, err error) {
	dir, err = resolveCaptureDir(dir)
	if err != nil {
		return "", err
	}
	return privateCopy(ctx, dir, tmpDir)
}

// privateCopy is PrivateCopy of a capture at a path reached without any
// symlink: every file is read through a handle on the directory that was
// validated.
func privateCopy(ctx context.Context, dir, tmpDir string) (dbPath string, err error) {
	info, err := openCapture(ctx, dir, false)
	if err != nil {
		return "", err
	}
	m := info.Manifest
	if info.MainHeaderOnly {
		return "", fmt.Errorf("%w: %s kept only the header of the %d-byte main %s: its WAL frames need the main image of that generation; if the main at %s is still that generation, copy it beside a copy of %s by hand and open that",
			ErrMainHeaderOnly, dir, m.Main.Size, m.Database, m.Database, info.WAL)
	}
	if info.Main == "" {
		return "", fmt.Errorf("%w: %w: %s has no main image; only its WAL can be inspected", ErrCaptureDamaged, ErrNoMainImage, dir)
	}
	pd, owner, err := makePrivateDir(tmpDir, privatePrefix)
	if err != nil {
		return "", fmt.Errorf("private copy of %s: %w", dir, err)
	}
	priv := pd.path
	defer func() {
		if err != nil {
			os.RemoveAll(priv)
		}
	}()
	defer pd.close()
	name := filepath.Base(info.Main)
	copies := []struct{ src, dst, sum string }{{info.Main, name, m.Main.SHA256}}
	if info.WAL != "" {
		copies = append(copies, struct{ src, dst, sum string }{info.WAL, name + "-wal", m.WAL.SHA256})
	}
	for _, c := range copies {
		if err := copyVerified(ctx, info, c.src, pd, c.dst, c.sum, owner); err != nil {
			return "", err
		}
	}
	if err := pd.sync(); err != nil {
		return "", err
	}
	return filepath.Join(priv, name), nil
}

// copyVerified copies src into d as name; a sha256 that differs from want
// (when the manifest has one) means the capture changed.
func copyVerified(ctx context.Context, info *CaptureInfo, src string, d capDir, name, want string, owner Owner) error {
	f, err := info.open(src)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer f.Close()
	st, err := fstatFile(f)
	if err != nil {
		return fmt.Errorf("stat %s: %w", src, err)
	}
	c, err := copyIntoDir(ctx, f, src, st.Size, d, name, owner, true)
	if err != nil {
		return err
	}
	if want != "" && !strings.EqualFold(c.sha256, want) {
		return damaged(src, fmt.Sprintf("has sha256 %s, manifest.json says %s (changed after the capture)", c.sha256, want))
	}
	return nil
}
