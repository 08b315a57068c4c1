package control

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPrepareStateDir(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b", "stateguard")
	if err := PrepareStateDir(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir mode = %v, want drwx------", fi.Mode())
	}
	if err := PrepareStateDir(dir); err != nil {
		t.Errorf("second PrepareStateDir: %v", err)
	}
}

func TestPrepareStateDirRefuses(t *testing.T) {
	base := t.TempDir()

	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	group := filepath.Join(base, "group")
	if err := os.Mkdir(group, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(group, 0o770); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		path, want string
	}{
		{link, "symlink"},
		{open, "chmod 700"},
		{group, "chmod 700"},
		{file, "not a directory"},
		{"", "XDG_STATE_HOME"},
		{"relative/dir", "not an absolute path"},
	}
	for _, tt := range tests {
		err := PrepareStateDir(tt.path)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("PrepareStateDir(%q) = %v, want an error mentioning %q", tt.path, err, tt.want)
		}
	}
	if fi, err := os.Stat(open); err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("a refused directory was changed: %v %v", fi.Mode(), err)
	}
}

func TestPrepareStateDirRefusesForeignOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a directory owned by another uid")
	}
	dir := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	err := PrepareStateDir(dir)
	if err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("PrepareStateDir on a directory owned by 65534 = %v", err)
	}
}
