package service

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// testExecutable is a real executable, since systemd-analyze verify
// checks that ExecStart's program exists.
func testExecutable(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// verify runs systemd-analyze verify on unit, written as
// stateguard-agentd.service, and fails on any complaint about it: verify
// exits 0 after warnings such as an unknown key or a bad quote.
func verify(t testing.TB, unit []byte, user bool) {
	t.Helper()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian package systemd); cannot verify the unit here")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, UnitName)
	if err := os.WriteFile(path, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"verify", path}
	env := os.Environ()
	if user {
		rt := t.TempDir()
		args = []string{"--user", "verify", path}
		env = append(env, "XDG_RUNTIME_DIR="+rt)
	}
	cmd := exec.Command(sa, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze %s: %v\n%s\nunit:\n%s", strings.Join(args, " "), err, out, unit)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, UnitName) {
			t.Errorf("systemd-analyze verify complains: %s", line)
		}
	}
	if t.Failed() {
		t.Logf("unit:\n%s", unit)
	}
}

// unitSections parses a unit file into section → key → values.
func unitSections(t *testing.T, unit []byte) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(unit), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("bad unit line %q", line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

func TestSystemUnitVerifies(t *testing.T) {
	host := plantHomes(t)
	cfg := &Config{StateDir: "/srv/state dir", Socket: "/srv/run%/agent.sock"}
	cfg.ApplyDefaults()
	spec, _, err := BuildSpec(SpecOptions{Kind: Systemd, Config: cfg, ConfigPath: "/etc/stateguard/agent $HOME%h.toml",
		Executable: testExecutable(t), Discover: host.disc, Host: host.files})
	if err != nil {
		t.Fatal(err)
	}
	unit, err := spec.Render()
	if err != nil {
		t.Fatal(err)
	}
	verify(t, unit, false)

	s := unitSections(t, unit)
	one := func(section, key, want string) {
		t.Helper()
		if got := s[section][key]; len(got) != 1 || got[0] != want {
			t.Errorf("[%s] %s = %q, want %q", section, key, got, want)
		}
	}
	one("Unit", "StartLimitIntervalSec", "120s")
	one("Unit", "StartLimitBurst", "5")
	one("Service", "Restart", "on-failure")
	one("Service", "RestartSec", "2s")
	one("Service", "Type", "notify")
	one("Service", "NotifyAccess", "main")
	one("Service", "TimeoutStartSec", "5min")
	one("Service", "ExecStart", execStartWant(spec.Executable))
	one("Service", "ExecReload", "/bin/kill -HUP $MAINPID")
	one("Service", "ProtectSystem", "strict")
	one("Service", "NoNewPrivileges", "yes")
	one("Service", "PrivateTmp", "yes")
	one("Service", "RuntimeDirectory", "stateguard")
	one("Service", "StateDirectory", "stateguard")
	caps := "CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_KILL CAP_CHOWN CAP_FOWNER CAP_SETUID CAP_SETGID"
	one("Service", "CapabilityBoundingSet", caps)
	one("Service", "AmbientCapabilities", caps)
	one("Install", "WantedBy", "multi-user.target")
	if _, ok := s["Service"]["StartLimitIntervalSec"]; ok {
		t.Error("StartLimitIntervalSec is in [Service]; systemd only honours it in [Unit]")
	}
	rw := strings.Join(s["Service"]["ReadWritePaths"], "\n")
	for _, want := range []string{
		`-"` + strings.ReplaceAll(host.parent, "%", "%%") + `"`, // $ is literal outside command lines
		`-"` + host.sysHermes + `"`,
		`-"` + host.newHomes + `"`,
		`"/srv/state dir"`,
		"/srv/run%%",
	} {
		if !strings.Contains(rw, want) {
			t.Errorf("ReadWritePaths lacks %s:\n%s", want, rw)
		}
	}
}

func execStartWant(exe string) string {
	w, _ := systemdWord(exe, true)
	return w + ` run --config "/etc/stateguard/agent $$HOME%%h.toml"`
}

func TestUserUnitVerifies(t *testing.T) {
	home := t.TempDir()
	env := func(k string) string {
		if k == "HOME" {
			return home
		}
		return ""
	}
	spec, _, err := BuildSpec(SpecOptions{Kind: Systemd, Scope: UserScope, Getenv: env,
		ConfigPath: filepath.Join(home, ".config/stateguard/agent.toml"), Executable: testExecutable(t)})
	if err != nil {
		t.Fatal(err)
	}
	unit, err := spec.Render()
	if err != nil {
		t.Fatal(err)
	}
	verify(t, unit, true)
	s := unitSections(t, unit)
	for _, key := range []string{"CapabilityBoundingSet", "AmbientCapabilities", "ProtectSystem", "ReadWritePaths", "PrivateTmp", "StateDirectory", "RuntimeDirectory"} {
		if v, ok := s["Service"][key]; ok {
			t.Errorf("user unit sets %s=%q: a user manager cannot grant capabilities, and namespacing needs unprivileged user namespaces", key, v)
		}
	}
	if got := s["Install"]["WantedBy"]; len(got) != 1 || got[0] != "default.target" {
		t.Errorf("WantedBy = %q", got)
	}
	for key, want := range map[string]string{"Restart": "on-failure", "Type": "notify", "NotifyAccess": "main"} {
		if got := s["Service"][key]; len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want %s", key, got, want)
		}
	}
}

// TestVerifyCatchesABadValue proves verify (above) can fail on what the
// notify protocol added to the unit: an unparsable Type= or
// TimeoutStartSec= is refused, so the passing runs mean systemd accepts
// ours.
func TestVerifyCatchesABadValue(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	spec, _, err := BuildSpec(SpecOptions{Kind: Systemd, Scope: UserScope, Getenv: func(k string) string { return map[string]string{"HOME": "/home/x"}[k] },
		ConfigPath: "/home/x/agent.toml", Executable: testExecutable(t)})
	if err != nil {
		t.Fatal(err)
	}
	good, err := spec.Render()
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][2]string{{"TimeoutStartSec=5min", "TimeoutStartSec=five minutes"}, {"Type=notify", "Type=notifyy"}, {"WatchdogSec=2min", "WatchdogSec=two minutes"}} {
		unit := bytes.Replace(good, []byte(bad[0]), []byte(bad[1]), 1)
		if bytes.Equal(unit, good) {
			t.Fatalf("%s not in the unit", bad[0])
		}
		ft := &fakeT{TB: t}
		func() {
			defer func() { recover() }()
			verify(ft, unit, true)
		}()
		if !ft.failed {
			t.Errorf("verify accepted %s", bad[1])
		}
	}
}

// fakeT records a failure instead of failing the test.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) Fatalf(string, ...any) { f.failed = true; panic("fatal") }
func (f *fakeT) Failed() bool          { return f.failed }
func (f *fakeT) Logf(string, ...any)   {}

func TestSystemdWord(t *testing.T) {
	for _, tt := range []struct {
		in      string
		command bool
		want    string
	}{
		{"/usr/bin/agentd", true, "/usr/bin/agentd"},
		{"/a b", true, `"/a b"`},
		{"/a%b", false, "/a%%b"},
		{"/a$b", true, "/a$$b"},
		{"/a$b", false, "/a$b"},
		{`/a"b\c`, false, `"/a\"b\\c"`},
		{"/a;b", true, `"/a;b"`},
	} {
		got, err := systemdWord(tt.in, tt.command)
		if err != nil || got != tt.want {
			t.Errorf("systemdWord(%q, %v) = %q, %v; want %q", tt.in, tt.command, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "/a\nb"} {
		if _, err := systemdWord(bad, true); err == nil {
			t.Errorf("systemdWord(%q) accepted", bad)
		}
	}
}

// plistValue is a decoded property-list value.
type plistValue any

// decodePlist walks an XML property list with encoding/xml, the way
// launchd reads it: a <plist> holding one value; <dict> alternates <key>
// and a value.
func decodePlist(data []byte) (plistValue, error) {
	d := xml.NewDecoder(bytes.NewReader(data))
	d.Strict = true
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("no <plist> element: %w", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if se.Name.Local != "plist" {
				return nil, fmt.Errorf("root element is <%s>, want <plist>", se.Name.Local)
			}
			v, err := plistNext(d)
			if err != nil {
				return nil, err
			}
			if _, err := plistNext(d); !errors.Is(err, errEnd) {
				return nil, fmt.Errorf("<plist> holds more than one value")
			}
			return v, nil
		}
	}
}

var errEnd = errors.New("end of container")

func plistNext(d *xml.Decoder) (plistValue, error) {
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, err
		}
		switch tok := tok.(type) {
		case xml.EndElement:
			return nil, errEnd
		case xml.CharData:
			if len(bytes.TrimSpace(tok)) > 0 {
				return nil, fmt.Errorf("stray text %q", tok)
			}
		case xml.StartElement:
			return plistElement(d, tok)
		}
	}
}

func plistElement(d *xml.Decoder, se xml.StartElement) (plistValue, error) {
	switch se.Name.Local {
	case "dict":
		m := map[string]plistValue{}
		for {
			k, err := plistNext(d)
			if errors.Is(err, errEnd) {
				return m, nil
			}
			if err != nil {
				return nil, err
			}
			key, ok := k.(plistKey)
			if !ok {
				return nil, fmt.Errorf("<dict> entry %v is not a <key>", k)
			}
			v, err := plistNext(d)
			if err != nil {
				return nil, fmt.Errorf("value of key %s: %w", key, err)
			}
			if _, dup := m[string(key)]; dup {
				return nil, fmt.Errorf("key %s twice", key)
			}
			m[string(key)] = v
		}
	case "array":
		var a []plistValue
		for {
			v, err := plistNext(d)
			if errors.Is(err, errEnd) {
				return a, nil
			}
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
	case "true", "false":
		if err := d.Skip(); err != nil {
			return nil, err
		}
		return se.Name.Local == "true", nil
	case "key", "string", "integer":
		var s string
		if err := d.DecodeElement(&s, &se); err != nil {
			return nil, err
		}
		switch se.Name.Local {
		case "key":
			return plistKey(s), nil
		case "integer":
			var n int64
			if _, err := fmt.Sscan(s, &n); err != nil {
				return nil, fmt.Errorf("<integer>%s</integer>: %w", s, err)
			}
			return n, nil
		}
		return s, nil
	}
	return nil, fmt.Errorf("unexpected element <%s>", se.Name.Local)
}

type plistKey string

func TestLaunchdPlist(t *testing.T) {
	for _, scope := range []Scope{SystemScope, UserScope} {
		t.Run(scope.String(), func(t *testing.T) {
			home := "/Users/a & b"
			spec, _, err := BuildSpec(SpecOptions{Kind: Launchd, Scope: scope, ConfigPath: "/etc/stateguard/<agent>.toml",
				Executable: testExecutable(t), Getenv: func(k string) string { return map[string]string{"HOME": home}[k] }})
			if err != nil {
				t.Fatal(err)
			}
			data, err := spec.Render()
			if err != nil {
				t.Fatal(err)
			}
			v, err := decodePlist(data)
			if err != nil {
				t.Fatalf("plist does not parse: %v\n%s", err, data)
			}
			dict, ok := v.(map[string]plistValue)
			if !ok {
				t.Fatalf("plist top value is %T, want a dict", v)
			}
			wantLog := "/var/log/stateguard-agentd.log"
			if scope == UserScope {
				wantLog = home + "/Library/Logs/stateguard-agentd.log"
			}
			want := map[string]plistValue{
				"Label":             LaunchdLabel,
				"ProgramArguments":  []plistValue{spec.Executable, "run", "--config", "/etc/stateguard/<agent>.toml", "--watchdog", "2m0s"},
				"RunAtLoad":         true,
				"KeepAlive":         map[string]plistValue{"SuccessfulExit": false},
				"ThrottleInterval":  int64(5),
				"ExitTimeOut":       int64(30),
				"StandardOutPath":   wantLog,
				"StandardErrorPath": wantLog,
			}
			if !reflect.DeepEqual(dict, want) {
				t.Errorf("plist dict:\n got %#v\nwant %#v", dict, want)
			}
			if p, err := exec.LookPath("plutil"); err == nil {
				f := filepath.Join(t.TempDir(), "agentd.plist")
				os.WriteFile(f, data, 0o644)
				if out, err := exec.Command(p, "-lint", f).CombinedOutput(); err != nil {
					t.Errorf("plutil -lint: %v\n%s", err, out)
				}
			}
		})
	}
}

func TestDecodePlistRejects(t *testing.T) {
	for _, bad := range []string{
		`<plist><dict><string>x</string></dict></plist>`,
		`<plist><dict><key>a</key></dict></plist>`,
		`<plist><dict><key>a</key><true/><key>a</key><false/></dict></plist>`,
		`<plist><dict></plist>`,
		`<notplist/>`,
	} {
		if _, err := decodePlist([]byte(bad)); err == nil {
			t.Errorf("decodePlist(%s) accepted it", bad)
		}
	}
}

// TestGolden pins the rendered files byte for byte, so a template change
// shows up in review. Run with -update to rewrite them.
func TestGolden(t *testing.T) {
	cases := []struct {
		name string
		spec Spec
		file string
	}{
		{"system", Spec{Kind: Systemd, Executable: "/usr/local/bin/agentd", ConfigPath: SystemConfigPath,
			ReadWritePaths: []string{"-/home/alice/.hermes", "-/srv/hermes home", "/srv/stateguard"}}, "agentd.service"},
		{"user", Spec{Kind: Systemd, Scope: UserScope, Executable: "/home/alice/bin/agentd",
			ConfigPath: "/home/alice/.config/stateguard/agent.toml"}, "agentd.service"},
		{"launchd-system", Spec{Kind: Launchd, Executable: "/usr/local/bin/agentd", ConfigPath: SystemConfigPath,
			LogPath: "/var/log/stateguard-agentd.log"}, "agentd.plist"},
		{"launchd-user", Spec{Kind: Launchd, Scope: UserScope, Executable: "/Users/alice/bin/agentd",
			ConfigPath: "/Users/alice/.config/stateguard/agent.toml", LogPath: "/Users/alice/Library/Logs/stateguard-agentd.log"}, "agentd.plist"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.spec.Render()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "unit", c.name, c.file)
			if *update {
				os.MkdirAll(filepath.Dir(path), 0o755)
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the rendering:\n%s", path, got)
			}
		})
	}
}

func TestRenderRefusesRelativePaths(t *testing.T) {
	for _, s := range []Spec{
		{Kind: Systemd, Executable: "agentd", ConfigPath: "/c"},
		{Kind: Systemd, Executable: "/agentd", ConfigPath: "c.toml"},
		{Kind: "upstart", Executable: "/agentd", ConfigPath: "/c"},
		{Kind: Launchd, Executable: "/agentd", ConfigPath: "/c"}, // no log path
	} {
		if _, err := s.Render(); err == nil {
			t.Errorf("Render(%+v) accepted it", s)
		}
	}
}
