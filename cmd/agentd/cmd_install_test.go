package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stateguard/stateguard/service"
	"github.com/stateguard/stateguard/store"
)

// cmdRecorder records the service-manager commands the verbs run and
// answers `systemctl show` like a manager with the unit loaded.
type cmdRecorder struct {
	mu    sync.Mutex
	calls []string
	show  string
}

func (r *cmdRecorder) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := strings.Join(append([]string{name}, args...), " ")
	r.calls = append(r.calls, line)
	if strings.Contains(line, " show ") {
		return []byte(r.show), nil
	}
	return nil, nil
}

type testDeps struct {
	serviceDeps
	stdout, stderr *bytes.Buffer
	rec            *cmdRecorder
	unitDir        string
	home           string
	passwd         string
}

// newTestDeps points the verbs at a fake root: HOME and the config under
// a temp dir, units into unitDir, commands into a recorder, and a
// Hermes home with one named profile found through a passwd file.
func newTestDeps(t *testing.T, euid int) *testDeps {
	t.Helper()
	base := t.TempDir()
	home := filepath.Join(base, "home", "alice")
	if err := os.MkdirAll(filepath.Join(home, ".hermes", "profiles", "work"), 0o700); err != nil {
		t.Fatal(err)
	}
	passwd := filepath.Join(base, "passwd")
	os.WriteFile(passwd, []byte("alice:x:1000:1000::"+home+":/bin/sh\n"), 0o644)
	useradd := filepath.Join(base, "useradd")
	os.WriteFile(useradd, []byte("HOME="+filepath.Dir(home)+"\n"), 0o644)
	env := map[string]string{"HOME": home, "XDG_CONFIG_HOME": filepath.Join(base, "config")}
	td := &testDeps{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, rec: &cmdRecorder{}, unitDir: filepath.Join(base, "units"), home: home, passwd: passwd}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	td.serviceDeps = serviceDeps{
		stdout: td.stdout, stderr: td.stderr,
		getenv:     func(k string) string { return env[k] },
		geteuid:    func() int { return euid },
		detect:     func() (service.ManagerKind, error) { return service.Systemd, nil },
		executable: exe,
		discover:   store.DiscoverOptions{UserHome: filepath.Join(base, "nobody"), PasswdPath: passwd, Getenv: func(string) string { return "" }},
		host:       service.HostFiles{LoginDefs: filepath.Join(base, "no-login.defs"), UseraddDefaults: useradd},
		manager: func(kind service.ManagerKind, scope service.Scope) *service.Manager {
			if kind == "" {
				kind = service.Systemd
			}
			return &service.Manager{Kind: kind, Scope: scope, Runner: td.rec, Dir: td.unitDir,
				Getenv: func(k string) string { return env[k] }, Geteuid: func() int { return euid }}
		},
	}
	return td
}

// TestInstallPrintVerifies is the acceptance check: what `agentd install
// --print` writes passes systemd-analyze verify, system and user unit.
func TestInstallPrintVerifies(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian package systemd); cannot verify the printed unit here")
	}
	for _, user := range []bool{false, true} {
		name := map[bool]string{false: "system", true: "user"}[user]
		t.Run(name, func(t *testing.T) {
			td := newTestDeps(t, 1000)
			cfg := filepath.Join(t.TempDir(), "agent.toml")
			os.WriteFile(cfg, []byte("reconcile = \"5s\"\n"), 0o644)
			args := []string{"--print", "--manager", "systemd", "--config", cfg}
			if user {
				args = append(args, "--user")
			}
			if code := cmdInstall(context.Background(), args, td.serviceDeps); code != 0 {
				t.Fatalf("install --print exited %d: %s", code, td.stderr)
			}
			unit := td.stdout.Bytes()
			if len(td.rec.calls) > 0 {
				t.Errorf("--print ran commands: %q", td.rec.calls)
			}
			if entries, _ := os.ReadDir(td.unitDir); len(entries) > 0 {
				t.Errorf("--print wrote into the unit directory")
			}
			dir := t.TempDir()
			path := filepath.Join(dir, service.UnitName)
			if err := os.WriteFile(path, unit, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(sa, "verify", path)
			if user {
				cmd = exec.Command(sa, "--user", "verify", path)
				cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+t.TempDir())
			}
			out, err := cmd.CombinedOutput()
			if err != nil || bytes.Contains(out, []byte(service.UnitName)) {
				t.Errorf("systemd-analyze verify: %v\n%s\nunit:\n%s", err, out, unit)
			}
			if !bytes.Contains(unit, []byte("run --config "+cfg+"\n")) {
				t.Errorf("ExecStart does not run with --config %s:\n%s", cfg, unit)
			}
			// The directory the homes live in, not the home found today.
			wantHome := "ReadWritePaths=-" + filepath.Dir(td.home) + "\n"
			if has := bytes.Contains(unit, []byte(wantHome)); has == user {
				t.Errorf("user=%v: ReadWritePaths for the homes' parent present=%v:\n%s", user, has, unit)
			}
		})
	}
}

func TestInstallPrintLaunchd(t *testing.T) {
	td := newTestDeps(t, 0)
	if code := cmdInstall(context.Background(), []string{"--print", "--manager", "launchd"}, td.serviceDeps); code != 0 {
		t.Fatalf("exit %d: %s", code, td.stderr)
	}
	out := td.stdout.String()
	for _, want := range []string{"<key>Label</key>", "<string>" + service.SystemConfigPath + "</string>", "<key>KeepAlive</key>"} {
		if !strings.Contains(out, want) {
			t.Errorf("plist lacks %s:\n%s", want, out)
		}
	}
}

func TestServiceVerbs(t *testing.T) {
	ctx := context.Background()
	td := newTestDeps(t, 0)
	cfgPath := filepath.Join(t.TempDir(), "etc", "agent.toml")
	// The default config path is root's /etc/stateguard/agent.toml, which
	// a test must not create; name one explicitly, and check the stub
	// logic through the user scope below.
	os.MkdirAll(filepath.Dir(cfgPath), 0o755)
	os.WriteFile(cfgPath, nil, 0o644)
	// The test binary lives under /tmp, which install refuses for the
	// system unit (PrivateTmp would hide it).
	td.executable = "/usr/local/bin/agentd"

	run := func(f func(context.Context, []string, serviceDeps) int, args ...string) int {
		td.stdout.Reset()
		td.stderr.Reset()
		td.rec.calls = nil
		return f(ctx, args, td.serviceDeps)
	}
	if code := run(cmdInstall, "--config", cfgPath); code != 0 {
		t.Fatalf("install: %d %s", code, td.stderr)
	}
	want := []string{"systemctl daemon-reload", "systemctl enable " + service.UnitName}
	if strings.Join(td.rec.calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("install ran %q, want %q", td.rec.calls, want)
	}
	unit, err := os.ReadFile(filepath.Join(td.unitDir, service.UnitName))
	if err != nil || !bytes.Contains(unit, []byte("--config "+cfgPath)) {
		t.Fatalf("installed unit: %v\n%s", err, unit)
	}
	if code := run(cmdInstall, "--config", cfgPath); code != 1 || !strings.Contains(td.stderr.String(), "--force") {
		t.Errorf("second install: %d %s", code, td.stderr)
	}
	for _, v := range []struct {
		f    func(context.Context, []string, serviceDeps) int
		verb string
	}{
		{func(ctx context.Context, a []string, d serviceDeps) int {
			return controlVerb(ctx, "start", a, d, (*service.Manager).Start)
		}, "start"},
		{func(ctx context.Context, a []string, d serviceDeps) int {
			return controlVerb(ctx, "stop", a, d, (*service.Manager).Stop)
		}, "stop"},
		{func(ctx context.Context, a []string, d serviceDeps) int {
			return controlVerb(ctx, "restart", a, d, (*service.Manager).Restart)
		}, "restart"},
	} {
		if code := run(v.f); code != 0 {
			t.Errorf("%s: %d %s", v.verb, code, td.stderr)
		}
		if got := strings.Join(td.rec.calls, "\n"); got != "systemctl "+v.verb+" "+service.UnitName {
			t.Errorf("%s ran %q", v.verb, got)
		}
	}

	td.rec.show = "LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=77\n"
	if code := run(cmdStatus); code != 0 || !strings.Contains(td.stdout.String(), "pid 77") {
		t.Errorf("status: %d %q", code, td.stdout)
	}
	td.rec.show = "LoadState=loaded\nActiveState=inactive\nSubState=dead\nMainPID=0\n"
	if code := run(cmdStatus, "--json"); code != exitNotRunning {
		t.Errorf("status of a stopped service exited %d, want %d", code, exitNotRunning)
	}
	var st service.Status
	if err := json.Unmarshal(td.stdout.Bytes(), &st); err != nil || !st.Installed || st.Running {
		t.Errorf("status --json = %q (%v)", td.stdout, err)
	}

	if code := run(cmdUninstall); code != 0 {
		t.Errorf("uninstall: %d %s", code, td.stderr)
	}
	if _, err := os.Stat(filepath.Join(td.unitDir, service.UnitName)); !os.IsNotExist(err) {
		t.Errorf("unit left after uninstall: %v", err)
	}
	if _, err := os.Stat(cfgPath); err != nil {
		t.Errorf("uninstall removed the config: %v", err)
	}
}

func TestInstallUserWritesConfigStub(t *testing.T) {
	td := newTestDeps(t, 1000)
	if code := cmdInstall(context.Background(), []string{"--user"}, td.serviceDeps); code != 0 {
		t.Fatalf("install --user: %d %s", code, td.stderr)
	}
	cfg := filepath.Join(td.getenv("XDG_CONFIG_HOME"), "stateguard", "agent.toml")
	if _, err := service.Load(cfg, true); err != nil {
		t.Errorf("config stub: %v", err)
	}
	unit, _ := os.ReadFile(filepath.Join(td.unitDir, service.UnitName))
	if !bytes.Contains(unit, []byte("--config "+cfg)) || bytes.Contains(unit, []byte("Capabilit")) {
		t.Errorf("user unit:\n%s", unit)
	}
	want := "systemctl --user daemon-reload\nsystemctl --user enable " + service.UnitName
	if got := strings.Join(td.rec.calls, "\n"); got != want {
		t.Errorf("install --user ran %q", got)
	}
}

func TestInstallRefusals(t *testing.T) {
	td := newTestDeps(t, 1000)
	if code := cmdInstall(context.Background(), nil, td.serviceDeps); code != 1 || !strings.Contains(td.stderr.String(), "needs root") {
		t.Errorf("system install as uid 1000: %d %s", code, td.stderr)
	}
	td.stderr.Reset()
	bad := filepath.Join(t.TempDir(), "agent.toml")
	os.WriteFile(bad, []byte("reconcile = \"fast\"\n"), 0o644)
	if code := cmdInstall(context.Background(), []string{"--print", "--config", bad}, td.serviceDeps); code != 1 || !strings.Contains(td.stderr.String(), "line 1") {
		t.Errorf("invalid config: %d %s", code, td.stderr)
	}
	td.stderr.Reset()
	if code := cmdInstall(context.Background(), []string{"--manager", "upstart"}, td.serviceDeps); code != 2 {
		t.Errorf("--manager upstart: %d", code)
	}
	if len(td.rec.calls) > 0 {
		t.Errorf("refused installs ran %q", td.rec.calls)
	}
}

// TestInstallRefresh: a user added after install whose home is not under
// a directory the unit already makes writable (here /srv/carol) gets in
// through the homes drop-in, without replacing the unit; systemd-analyze
// verify reads the unit with the drop-in; uninstall removes both.
func TestInstallRefresh(t *testing.T) {
	ctx := context.Background()
	td := newTestDeps(t, 0)
	td.executable = "/usr/local/bin/agentd"
	cfgPath := filepath.Join(t.TempDir(), "agent.toml")
	os.WriteFile(cfgPath, nil, 0o644)
	run := func(args ...string) int {
		td.stdout.Reset()
		td.stderr.Reset()
		td.rec.calls = nil
		return cmdInstall(ctx, append(args, "--config", cfgPath), td.serviceDeps)
	}
	if code := run("--refresh"); code != 1 || !strings.Contains(td.stderr.String(), "not installed") {
		t.Errorf("refresh before install: %d %s", code, td.stderr)
	}
	if code := run(); code != 0 {
		t.Fatalf("install: %d %s", code, td.stderr)
	}
	unitPath := filepath.Join(td.unitDir, service.UnitName)
	unit, _ := os.ReadFile(unitPath)

	carol := filepath.Join(filepath.Dir(filepath.Dir(td.home)), "srv", "carol")
	if err := os.MkdirAll(filepath.Join(carol, ".hermes"), 0o700); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(td.passwd, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintf(f, "carol:x:1001:1001::%s:/bin/sh\n", carol)
	f.Close()

	if code := run("--refresh", "--print"); code != 0 || len(td.rec.calls) > 0 {
		t.Fatalf("refresh --print: %d %s %q", code, td.stderr, td.rec.calls)
	}
	printed := td.stdout.String()
	want := "ReadWritePaths=-" + filepath.Dir(carol) + "\n"
	if !strings.Contains(printed, want) || !strings.Contains(printed, "ReadWritePaths=-"+filepath.Dir(td.home)+"\n") {
		t.Errorf("drop-in lacks %s or alice's parent:\n%s", want, printed)
	}
	if code := run("--refresh"); code != 0 {
		t.Fatalf("refresh: %d %s", code, td.stderr)
	}
	if got := strings.Join(td.rec.calls, "\n"); got != "systemctl daemon-reload" {
		t.Errorf("refresh ran %q, want only a daemon-reload", got)
	}
	dropIn := filepath.Join(td.unitDir, service.UnitName+".d", service.HomesDropIn)
	b, err := os.ReadFile(dropIn)
	if err != nil || string(b) != printed {
		t.Errorf("drop-in %s (%v) differs from --print:\n%s", dropIn, err, b)
	}
	if after, _ := os.ReadFile(unitPath); !bytes.Equal(after, unit) {
		t.Errorf("refresh rewrote the unit")
	}
	if !strings.Contains(td.stdout.String(), "agentd restart") {
		t.Errorf("refresh does not say a restart applies it: %s", td.stdout)
	}

	if sa, err := exec.LookPath("systemd-analyze"); err == nil {
		dir := t.TempDir()
		u := bytes.Replace(unit, []byte("ExecStart=/usr/local/bin/agentd"), []byte("ExecStart="+agentdBinary(t)), 1)
		os.WriteFile(filepath.Join(dir, service.UnitName), u, 0o644)
		os.MkdirAll(filepath.Join(dir, service.UnitName+".d"), 0o755)
		os.WriteFile(filepath.Join(dir, service.UnitName+".d", service.HomesDropIn), b, 0o644)
		out, err := exec.Command(sa, "verify", filepath.Join(dir, service.UnitName)).CombinedOutput()
		if err != nil || bytes.Contains(out, []byte(service.UnitName)) {
			t.Errorf("systemd-analyze verify of the unit with its drop-in: %v\n%s", err, out)
		}
	}

	if code := cmdUninstall(ctx, nil, td.serviceDeps); code != 0 {
		t.Fatalf("uninstall: %d %s", code, td.stderr)
	}
	if _, err := os.Stat(filepath.Dir(dropIn)); !os.IsNotExist(err) {
		t.Errorf("uninstall left %s: %v", filepath.Dir(dropIn), err)
	}
}

func TestInstallRefreshOnlySystemd(t *testing.T) {
	td := newTestDeps(t, 1000)
	for _, args := range [][]string{{"--refresh", "--user", "--print"}, {"--refresh", "--manager", "launchd", "--print"}} {
		td.stderr.Reset()
		if code := cmdInstall(context.Background(), args, td.serviceDeps); code != 1 || !strings.Contains(td.stderr.String(), "only the system-wide systemd unit") {
			t.Errorf("%q: %d %s", args, code, td.stderr)
		}
	}
	td.stderr.Reset()
	if code := cmdInstall(context.Background(), []string{"--refresh"}, td.serviceDeps); code != 1 || !strings.Contains(td.stderr.String(), "as root") {
		t.Errorf("refresh as uid 1000: %d %s", code, td.stderr)
	}
}
