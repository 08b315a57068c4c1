//go:build linux

package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// unreadableClone stands in for a reflink clone whose bytes cannot be
// read back (an I/O error on the clone's extents): the new file holds
// src's bytes but is open write-only, so every read of it fails.
func unreadableClone(t *testing.T) func(*os.File, capDir, string, Owner) (*os.File, bool, error) {
	return func(src *os.File, d capDir, name string, owner Owner) (*os.File, bool, error) {
		f, err := d.createExcl(name, owner)
		if err != nil {
			return nil, false, err
		}
		st, err := fstatFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, io.NewSectionReader(src, 0, st.Size)); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return os.NewFile(uintptr(fd), d.join(name)), true, nil
	}
}

// TestCaptureCloneReadFailure: a clone whose bytes cannot be read back is
// a failed capture, never one with an empty sha256 that later checks skip.
func TestCaptureCloneReadFailure(t *testing.T) {
	gen, _ := crashedGeneration(t, 5, true)
	src := openPinned(t, gen)
	dir := t.TempDir()
	cloneFile = unreadableClone(t)
	t.Cleanup(func() { cloneFile = cloneOrCreate })
	c, err := WriteCapture(context.Background(), src, CaptureRequest{DBPath: filepath.Join(dir, "state.db"), PID: 11})
	if err == nil {
		t.Fatalf("capture from unreadable clones succeeded: %s, wal sha256 %q", c.Dir, c.Manifest.WAL.SHA256)
	}
	if !strings.Contains(err.Error(), "bad file descriptor") {
		t.Fatalf("capture error %v does not carry the read failure", err)
	}
	if left := retiredDirs(t, dir); len(left) != 0 {
		t.Fatalf("a failed capture left %v behind", left)
	}
}

// TestOpenCaptureRefusesMissingSum: a stateguard capture whose manifest
// lost a file's sha256 cannot be verified, so it is damaged, for
// OpenCapture and for PrivateCopy alike.
func TestOpenCaptureRefusesMissingSum(t *testing.T) {
	gen, _ := crashedGeneration(t, 5, true)
	src := openPinned(t, gen)
	c, err := WriteCapture(context.Background(), src, CaptureRequest{DBPath: filepath.Join(t.TempDir(), "state.db"), PID: 11})
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"wal", "main"} {
		t.Run(role, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), filepath.Base(c.Dir))
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			ents, err := os.ReadDir(c.Dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				b, err := os.ReadFile(filepath.Join(c.Dir, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if e.Name() == ManifestName {
					b = dropSum(t, b, role)
				}
				if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := OpenCapture(dir); !errors.Is(err, ErrCaptureDamaged) || !strings.Contains(err.Error(), "no sha256") {
				t.Fatalf("OpenCapture without the %s sha256: %v, want damaged", role, err)
			}
			if _, err := PrivateCopy(context.Background(), dir, t.TempDir()); !errors.Is(err, ErrCaptureDamaged) {
				t.Fatalf("PrivateCopy without the %s sha256: %v, want damaged", role, err)
			}
		})
	}
}

// dropSum removes role's sha256 from a manifest.
func dropSum(t *testing.T, b []byte, role string) []byte {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	f, ok := m[role].(map[string]any)
	if !ok || f["sha256"] == nil {
		t.Fatalf("manifest has no %s.sha256: %s", role, b)
	}
	delete(f, "sha256")
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
