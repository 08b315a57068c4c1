package service

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/store"
)

// plantedHost is a fake host for the system unit's writable paths: a
// passwd file, login.defs and useradd defaults, and the homes they name.
type plantedHost struct {
	disc  store.DiscoverOptions
	files HostFiles
	// parent holds the login users' homes (a space, a percent sign and a
	// dollar in its name); homes are their Hermes homes.
	parent string
	homes  []string
	// sysHermes is a system user's Hermes home; other is the parent of a
	// login user whose home does not exist yet; newHomes is useradd's
	// base for homes created later.
	sysHermes, other, newHomes string
}

func plantHomes(t *testing.T) plantedHost {
	t.Helper()
	base := t.TempDir()
	h := plantedHost{parent: filepath.Join(base, "home s%d$x"), sysHermes: filepath.Join(base, "var lib svc", ".hermes"),
		other: filepath.Join(base, "other"), newHomes: filepath.Join(base, "new homes")}
	var passwd strings.Builder
	for i, name := range []string{"alice", "bob smith"} {
		hh := filepath.Join(h.parent, name, ".hermes")
		if err := os.MkdirAll(filepath.Join(hh, "profiles", "work"), 0o700); err != nil {
			t.Fatal(err)
		}
		h.homes = append(h.homes, hh)
		fmt.Fprintf(&passwd, "u%d:x:%d:%d::%s:/bin/sh\n", i, 2001+i, 2001+i, filepath.Dir(hh))
	}
	for _, d := range []string{h.sysHermes, h.other, h.newHomes, filepath.Join(base, "low", "u"), filepath.Join(base, "high", "u")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Fprintf(&passwd, "svc:x:500:500::%s:/usr/sbin/nologin\n", filepath.Dir(h.sysHermes))
	fmt.Fprintf(&passwd, "later:x:3000:3000::%s:/bin/sh\n", filepath.Join(h.other, "later"))
	fmt.Fprintf(&passwd, "low:x:1500:1500::%s:/bin/sh\n", filepath.Join(base, "low", "u"))
	fmt.Fprintf(&passwd, "high:x:7000:7000::%s:/bin/sh\n", filepath.Join(base, "high", "u"))
	fmt.Fprintf(&passwd, "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\nbroken line\n")
	write := func(name, content string) string {
		p := filepath.Join(base, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	h.disc = store.DiscoverOptions{
		Getenv:     func(string) string { return "" },
		UserHome:   filepath.Join(base, "nobody-here"),
		PasswdPath: write("passwd", passwd.String()),
	}
	h.files = HostFiles{
		LoginDefs:       write("login.defs", "# shadow\nUID_MIN\t\t 2000\nUID_MAX 5000\n"),
		UseraddDefaults: write("useradd", "# useradd defaults\nSHELL=/bin/sh\nHOME=\""+h.newHomes+"\"\n"),
	}
	return h
}

func TestBuildSpecSystemd(t *testing.T) {
	host := plantHomes(t)
	extraHome := filepath.Join(t.TempDir(), "srv hermes")
	if err := os.Mkdir(extraHome, 0o700); err != nil {
		t.Fatal(err)
	}
	// A configured home inside a login user's home is covered already;
	// one that does not exist yet makes its parent writable, so creating
	// it later needs no reinstall.
	insideParent := filepath.Join(host.homes[0], "profiles")
	notYet := filepath.Join(t.TempDir(), "later", "hermes")
	if err := os.MkdirAll(filepath.Dir(notYet), 0o755); err != nil {
		t.Fatal(err)
	}
	genericDir := t.TempDir()
	cfg := &Config{
		Homes:    []string{extraHome, insideParent, notYet},
		StateDir: "/srv/stateguard/state",
		Socket:   "/srv/stateguard/run/agent.sock",
		Stores:   []StoreConfig{{Path: filepath.Join(genericDir, "app.db"), Kind: KindGeneric}},
	}
	cfg.ApplyDefaults()
	exe := testExecutable(t)
	spec, problems, err := BuildSpec(SpecOptions{
		Kind: Systemd, Config: cfg, ConfigPath: "/etc/stateguard/agent.toml",
		Executable: exe, Getenv: func(string) string { return "" }, Discover: host.disc, Host: host.files,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || !errors.Is(problems[0].Err, store.ErrMissingHome) || problems[0].Path != notYet {
		t.Errorf("problems: %v; want only %s, missing", problems, notYet)
	}
	var want []string
	for _, d := range []string{host.parent, host.sysHermes, host.other, host.newHomes, extraHome, filepath.Dir(notYet), genericDir} {
		want = append(want, "-"+d)
	}
	sort.Strings(want)
	want = append(want, "/srv/stateguard/state", "/srv/stateguard/run")
	if !reflect.DeepEqual(spec.ReadWritePaths, want) {
		t.Errorf("ReadWritePaths:\n got %q\nwant %q", spec.ReadWritePaths, want)
	}
	if got := spec.Args(); !reflect.DeepEqual(got, []string{exe, "run", "--config", "/etc/stateguard/agent.toml"}) {
		t.Errorf("Args = %q", got)
	}

	// discover_users = false: no passwd or useradd directories, only the
	// configured homes and stores.
	off := false
	cfg.DiscoverUsers = &off
	spec, _, err = BuildSpec(SpecOptions{Kind: Systemd, Config: cfg, ConfigPath: "/c.toml", Executable: exe, Discover: host.disc, Host: host.files})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"-" + insideParent, "-" + extraHome, "-" + filepath.Dir(notYet), "-" + genericDir}
	sort.Strings(want)
	want = append(want, "/srv/stateguard/state", "/srv/stateguard/run")
	if !reflect.DeepEqual(spec.ReadWritePaths, want) {
		t.Errorf("discover_users=false: ReadWritePaths:\n got %q\nwant %q", spec.ReadWritePaths, want)
	}
}

// TestHomeBaseNeverASystemDirectory: root's home is /root, whose parent
// is /; a home directly under /var or /usr counts only itself, and a home
// inside /usr or /etc nothing.
func TestHomeBaseNeverASystemDirectory(t *testing.T) {
	for _, tt := range []struct {
		home, want string
	}{
		{"/", ""},
		{"/usr/games", ""},
		{"/etc", ""},
		{"/nonexistent", ""},
		{"/dev/null", ""},
	} {
		got, ok := homeBase(tt.home)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("homeBase(%q) = %q, %v; want %q", tt.home, got, ok, tt.want)
		}
	}
	if fi, err := os.Stat("/root"); err == nil && fi.IsDir() {
		if got, ok := homeBase("/root"); !ok || got != "/root" {
			t.Errorf("homeBase(/root) = %q, %v; want /root itself (its parent is /)", got, ok)
		}
	}
	dir := filepath.Join(t.TempDir(), "srv")
	if err := os.MkdirAll(filepath.Join(dir, "alice"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, ok := homeBase(filepath.Join(dir, "alice")); !ok || got != dir {
		t.Errorf("homeBase(%s/alice) = %q, %v; want the parent", dir, got, ok)
	}
	if got, ok := homeBase(filepath.Join(dir, "bob")); !ok || got != dir {
		t.Errorf("homeBase of a home not created yet = %q, %v; want its parent", got, ok)
	}
}

func TestOutermost(t *testing.T) {
	got := outermost([]string{"/home/a/.hermes", "/home", "/homework", "/srv/x/", "/srv/x/y", "/home"})
	want := []string{"/home", "/homework", "/srv/x"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("outermost = %q, want %q", got, want)
	}
}
