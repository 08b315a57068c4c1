//go:build unix

package recovery

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ReadDivert reads the divert published in an incident directory and
// checks that every file its divert.json lists is still there, a regular
// file with the recorded size and sha256. A changed or missing file is an
// error wrapping ErrDivertDamaged. The directory is reached with no
// symlink in any component and everything in it is read through its
// handle (readDivertIn), never by name.
func ReadDivert(dir string) (DivertReport, error) {
	dir = filepath.Clean(dir)
	d, err := openStorePath(dir)
	if err != nil {
		return DivertReport{}, fmt.Errorf("read divert %s: %w (symlinks are not followed)", dir, err)
	}
	defer d.close()
	return readDivertIn(d)
}

// readDivertIn is ReadDivert of the incident directory d names.
func readDivertIn(d capDir) (DivertReport, error) {
	m, err := readDivertManifest(d)
	if err != nil {
		return DivertReport{}, err
	}
	rep, err := m.report(d.path)
	if err != nil {
		return DivertReport{}, err
	}
	for _, f := range rep.Files {
		if err := checkDivertFile(d, f); err != nil {
			return DivertReport{}, err
		}
	}
	return rep, nil
}

func readDivertManifest(d capDir) (*divertManifest, error) {
	path := d.join(DivertManifestName)
	fh, err := openatRegular(d, DivertManifestName)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no %s: it was not written by a finished divert; remove it to divert again", ErrDivertDamaged, d.path, DivertManifestName)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	b, err := readLimited(fh, path, 64<<20)
	if err != nil {
		return nil, err
	}
	var m divertManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrDivertDamaged, path, err)
	}
	return &m, nil
}

// openInDivert opens f (a path report made under d.path, a local name)
// from d's handle, each directory on the way opened without following a
// symlink.
func openInDivert(d capDir, path string) (*os.File, error) {
	rel, err := filepath.Rel(d.path, path)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("%s is not inside %s", path, d.path)
	}
	parts := strings.Split(rel, string(filepath.Separator))
	cur := d
	for _, p := range parts[:len(parts)-1] {
		sub, err := cur.openChildDir(p)
		if cur.fd != d.fd {
			cur.close()
		}
		if err != nil {
			return nil, err
		}
		cur = sub
	}
	if cur.fd != d.fd {
		defer cur.close()
	}
	return openatRegular(cur, parts[len(parts)-1])
}

func checkDivertFile(d capDir, f DivertFile) error {
	fh, err := openInDivert(d, f.Path)
	if err != nil {
		return fmt.Errorf("%w: %s: %v; remove the incident directory to divert again (replays already done stay done)", ErrDivertDamaged, f.Path, err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", f.Path, err)
	}
	if !st.Mode().IsRegular() || st.Size() != f.Bytes {
		return fmt.Errorf("%w: %s is %d bytes (mode %v), %s says %d", ErrDivertDamaged, f.Path, st.Size(), st.Mode(), DivertManifestName, f.Bytes)
	}
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return fmt.Errorf("read %s: %w", f.Path, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != f.SHA256 {
		return fmt.Errorf("%w: %s has sha256 %s, %s says %s (changed after the divert)", ErrDivertDamaged, f.Path, sum, DivertManifestName, f.SHA256)
	}
	return nil
}

// DivertSessionFor finds the divert that wrote jsonlPath (its divert.json
// is in the file's directory, or the one above for pre-replacement/) and
// returns the file's entry, so a replay queued by path alone can still
// create a missing session from the capture's row (ReplayOptions). ok is
// false for a file no divert lists, such as one Hermes wrote.
func DivertSessionFor(jsonlPath string) (f DivertFile, ok bool, err error) {
	abs, err := filepath.Abs(jsonlPath)
	if err != nil {
		return DivertFile{}, false, err
	}
	dir := filepath.Dir(abs)
	if filepath.Base(dir) == DivertPreReplacementDir {
		dir = filepath.Dir(dir)
	}
	d, err := openStorePath(dir)
	if err != nil {
		return DivertFile{}, false, err
	}
	defer d.close()
	m, err := readDivertManifest(d)
	if errors.Is(err, ErrDivertDamaged) {
		return DivertFile{}, false, nil
	}
	if err != nil {
		return DivertFile{}, false, err
	}
	rep, err := m.report(dir)
	if err != nil {
		return DivertFile{}, false, err
	}
	for _, f := range rep.Files {
		if f.Path == abs {
			return f, true, nil
		}
	}
	return DivertFile{}, false, nil
}
