package control

import (
	"fmt"
	"os/user"
	"path/filepath"
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
