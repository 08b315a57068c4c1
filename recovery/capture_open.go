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
)

// ErrCaptureDamaged marks a capture whose files do not match its manifest
// (truncated, changed, missing) or that was never finished.
var ErrCaptureDamaged = errors.New("capture damaged")

// ErrMainHeaderOnly marks a capture that kept only the main's header (the
// main was over MainImageMaxBytes), so it cannot be opened on its own.
var ErrMainHeaderOnly = errors.New("capture holds only the main header")

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
}

// OpenCapture validates a capture directory: manifest present and
// parseable, every file it names present as a regular file, sizes and
// sha256 equal to the manifest's. A damaged capture gets an error wrapping
// ErrCaptureDamaged that names the file and what to do. It never opens the
// capture with SQLite; use PrivateCopy for that.
func OpenCapture(dir string) (*CaptureInfo, error) {
	return openCapture(context.Background(), dir, true)
}

func openCapture(ctx context.Context, dir string, verify bool) (*CaptureInfo, error) {
	dir = filepath.Clean(dir)
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("open capture: %w", err)
	}
	if fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() {
		return nil, fmt.Errorf("open capture %s: not a directory (symlinks are not followed)", dir)
	}
	if strings.HasSuffix(dir, partialSuffix) {
		return nil, fmt.Errorf("%w: %s is a staging directory: the capture was never finished; if its orphan is still pinned, capture again, otherwise keep it for forensics", ErrCaptureDamaged, dir)
	}
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	info := &CaptureInfo{Dir: dir, Manifest: m, Producer: "hermes", MainHeaderOnly: m.Main.HeaderOnly()}
	if m.Stateguard != nil {
		info.Producer = "stateguard"
	}
	for _, e := range m.files() {
		path := filepath.Join(dir, e.name)
		if err := checkCaptureFile(ctx, path, e, verify); err != nil {
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

func checkCaptureFile(ctx context.Context, path string, e manifestEntry, verify bool) error {
	f, err := openNoFollow(path)
	if errors.Is(err, os.ErrNotExist) {
		return damaged(path, "is missing (manifest.json lists it as "+e.role+")")
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return damaged(path, "is a symlink")
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
	if verify && e.sha256 != "" {
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
// WAL. The caller removes filepath.Dir(dbPath) when done.
func PrivateCopy(ctx context.Context, dir, tmpDir string) (dbPath string, err error) {
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
		return "", fmt.Errorf("%w: %s has no main image; only its WAL can be inspected", ErrCaptureDamaged, dir)
	}
	priv, err := os.MkdirTemp(tmpDir, privatePrefix)
	if err != nil {
		return "", fmt.Errorf("private copy of %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(priv)
		}
	}()
	pd, err := openVettedDir(priv)
	if err != nil {
		return "", fmt.Errorf("private copy of %s: %w", dir, err)
	}
	defer pd.close()
	// Whoever made priv owns the copy: the agent, or the profile's owner
	// when the step runs as that user (store.AsOwner).
	var pst unix.Stat_t
	if err := unix.Fstat(pd.fd, &pst); err != nil {
		return "", fmt.Errorf("private copy of %s: stat %s: %w", dir, priv, err)
	}
	owner := Owner{UID: int(pst.Uid), GID: int(pst.Gid)}
	if err := writePrivateOwner(pd, owner); err != nil {
		return "", fmt.Errorf("private copy of %s: %w", dir, err)
	}
	name := filepath.Base(info.Main)
	copies := []struct{ src, dst, sum string }{{info.Main, name, m.Main.SHA256}}
	if info.WAL != "" {
		copies = append(copies, struct{ src, dst, sum string }{info.WAL, name + "-wal", m.WAL.SHA256})
	}
	for _, c := range copies {
		if err := copyVerified(ctx, c.src, pd, c.dst, c.sum, owner); err != nil {
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
func copyVerified(ctx context.Context, src string, d capDir, name, want string, owner Owner) error {
	f, err := openNoFollow(src)
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
