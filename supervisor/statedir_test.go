package supervisor

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaultStateDir(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		euid int
		want string
	}{
		{"root ignores XDG", map[string]string{"XDG_STATE_HOME": "/x", "HOME": "/root"}, 0, rootStateDir},
		{"xdg", map[string]string{"XDG_STATE_HOME": "/x/state", "HOME": "/home/u"}, 1000, "/x/state/stateguard"},
		{"relative xdg ignored", map[string]string{"XDG_STATE_HOME": "rel", "HOME": "/home/u"}, 1000, "/home/u/.local/state/stateguard"},
		{"home", map[string]string{"HOME": "/home/u"}, 1000, "/home/u/.local/state/stateguard"},
		{"nothing", map[string]string{}, 2147483000, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DefaultStateDir(envOf(tt.env), tt.euid); got != tt.want {
				t.Errorf("DefaultStateDir = %q, want %q", got, tt.want)
			}
		})
	}
	if rootStateDir != "/var/lib/stateguard" {
		t.Errorf("root state dir = %q", rootStateDir)
	}
}

func TestDefaultStateDirPasswdFallback(t *testing.T) {
	u, err := user.Lookup("nobody")
	if err != nil || !filepath.IsAbs(u.HomeDir) {
		t.Skipf("no passwd entry for nobody with an absolute home (%v)", err)
	}
	var uid int
	if _, err := fmt.Sscan(u.Uid, &uid); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(u.HomeDir, ".local", "state", "stateguard")
	if got := DefaultStateDir(envOf(nil), uid); got != want {
		t.Errorf("DefaultStateDir without HOME = %q, want %q", got, want)
	}
}

func TestDefaultRuntimeDir(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		euid int
		want string
	}{
		{"root", map[string]string{"XDG_RUNTIME_DIR": "/run/user/0"}, 0, rootRuntimeDir},
		{"xdg", map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000", "HOME": "/home/u"}, 1000, "/run/user/1000/stateguard"},
		{"fallback under state dir", map[string]string{"HOME": "/home/u"}, 1000, "/home/u/.local/state/stateguard/run"},
		{"fallback under xdg state", map[string]string{"XDG_STATE_HOME": "/s", "HOME": "/home/u"}, 1000, "/s/stateguard/run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DefaultRuntimeDir(envOf(tt.env), tt.euid); got != tt.want {
				t.Errorf("DefaultRuntimeDir = %q, want %q", got, tt.want)
			}
		})
	}
}

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
