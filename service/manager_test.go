package service

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// recorder is a Runner that records every command and answers from a
// script: the first reply whose prefix matches the command line.
type recorder struct {
	mu      sync.Mutex
	calls   []string
	replies []reply
}

type reply struct {
	prefix string
	out    string
	code   int // non-zero: a *CommandError
}

func (r *recorder) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, line)
	for _, rep := range r.replies {
		if strings.HasPrefix(line, rep.prefix) {
			if rep.code != 0 {
				return []byte(rep.out), &CommandError{Argv: append([]string{name}, args...), Code: rep.code, Output: rep.out}
			}
			return []byte(rep.out), nil
		}
	}
	return nil, nil
}

// take returns the calls recorded since the last take.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

func (r *recorder) expect(t *testing.T, what string, want ...string) {
	t.Helper()
	got := r.take()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s ran:\n  %s\nwant:\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestSystemdCommands(t *testing.T) {
	for _, scope := range []Scope{SystemScope, UserScope} {
		t.Run(scope.String(), func(t *testing.T) {
			ctx := context.Background()
			sc := "systemctl"
			if scope == UserScope {
				sc = "systemctl --user"
			}
			rec := &recorder{}
			m := &Manager{Kind: Systemd, Scope: scope, Runner: rec, Dir: t.TempDir(), Geteuid: func() int { return 1000 }}
			path, _ := m.Path()

			if err := m.Start(ctx); !errors.Is(err, ErrNotInstalled) {
				t.Errorf("Start before install = %v, want ErrNotInstalled", err)
			}
			rec.expect(t, "Start before install")
			rec.replies = []reply{{prefix: sc + " show", out: "LoadState=not-found\nActiveState=inactive\nSubState=dead\nMainPID=0\n"}}
			st, err := m.Status(ctx)
			if err != nil || st.Installed || st.Running {
				t.Errorf("Status before install = %+v, %v", st, err)
			}
			rec.expect(t, "Status", sc+" show --property=LoadState,ActiveState,SubState,MainPID "+UnitName)

			unit := []byte("[Service]\nExecStart=/bin/true\n")
			got, err := m.Install(ctx, unit, InstallOptions{})
			if err != nil || got != path {
				t.Fatalf("Install = %s, %v", got, err)
			}
			rec.expect(t, "Install", sc+" daemon-reload", sc+" enable "+UnitName)
			if b, err := os.ReadFile(path); err != nil || string(b) != string(unit) {
				t.Errorf("installed file = %q, %v", b, err)
			}
			if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
				t.Errorf("unit mode %v, want 0644", fi.Mode())
			}
			if _, err := m.Install(ctx, unit, InstallOptions{}); err == nil || !strings.Contains(err.Error(), "--force") {
				t.Errorf("second Install = %v, want a refusal naming --force", err)
			}
			rec.expect(t, "refused Install")
			if _, err := m.Install(ctx, []byte("[Service]\nExecStart=/bin/false\n"), InstallOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
			rec.expect(t, "Install --force", sc+" daemon-reload", sc+" enable "+UnitName)
			if b, _ := os.ReadFile(path); !strings.Contains(string(b), "/bin/false") {
				t.Errorf("--force did not replace the unit: %q", b)
			}

			for _, v := range []struct {
				name string
				call func(context.Context) error
			}{{"start", m.Start}, {"stop", m.Stop}, {"restart", m.Restart}} {
				if err := v.call(ctx); err != nil {
					t.Errorf("%s: %v", v.name, err)
				}
				rec.expect(t, v.name, sc+" "+v.name+" "+UnitName)
			}

			rec.replies = []reply{{prefix: sc + " show", out: "MainPID=4242\nLoadState=loaded\nActiveState=active\nSubState=running\n"}}
			st, err = m.Status(ctx)
			want := Status{Kind: Systemd, Scope: scope.String(), Path: path, Installed: true, Running: true, PID: 4242, State: "active (running)"}
			if err != nil || st != want {
				t.Errorf("Status = %+v, %v; want %+v", st, err, want)
			}
			rec.replies = []reply{{prefix: sc + " show", out: "LoadState=loaded\nActiveState=failed\nSubState=failed\nMainPID=0\n"}}
			if st, _ = m.Status(ctx); st.Running || st.State != "failed" || !st.Installed {
				t.Errorf("failed unit Status = %+v", st)
			}
			rec.take()

			// A command failing surfaces systemctl's message and a hint.
			rec.replies = []reply{{prefix: sc + " start", code: 1, out: "Job for stateguard-agentd.service failed."}}
			err = m.Start(ctx)
			if err == nil || !strings.Contains(err.Error(), "Job for stateguard-agentd.service failed") || !strings.Contains(err.Error(), "journalctl") {
				t.Errorf("failing start = %v", err)
			}
			rec.take()

			rec.replies = nil
			if _, err := m.Uninstall(ctx); err != nil {
				t.Fatal(err)
			}
			rec.expect(t, "Uninstall", sc+" disable --now "+UnitName, sc+" daemon-reload")
			if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("unit still there after Uninstall: %v", err)
			}
			if _, err := m.Uninstall(ctx); !errors.Is(err, ErrNotInstalled) {
				t.Errorf("second Uninstall = %v, want ErrNotInstalled", err)
			}
			rec.expect(t, "second Uninstall")
		})
	}
}

const launchctlPrintRunning = `system/com.github.stateguard.agentd = {
	active count = 1
	path = /Library/LaunchDaemons/com.github.stateguard.agentd.plist
	type = LaunchDaemon
	state = running

	program = /usr/local/bin/agentd
	pid = 731
	endpoints = {
		state = inactive
	}
}
`

func TestLaunchdCommands(t *testing.T) {
	for _, scope := range []Scope{SystemScope, UserScope} {
		t.Run(scope.String(), func(t *testing.T) {
			ctx := context.Background()
			domain := "system"
			if scope == UserScope {
				domain = "gui/501"
			}
			target := domain + "/" + LaunchdLabel
			notLoaded := reply{prefix: "launchctl print", code: 113, out: "Could not find service \"" + LaunchdLabel + "\" in domain for port"}
			rec := &recorder{}
			m := &Manager{Kind: Launchd, Scope: scope, Runner: rec, Dir: t.TempDir(), Geteuid: func() int { return 501 }}
			path, _ := m.Path()
			if filepath.Base(path) != LaunchdLabel+".plist" {
				t.Errorf("plist path %s", path)
			}

			if _, err := m.Install(ctx, []byte("<plist/>"), InstallOptions{}); err != nil {
				t.Fatal(err)
			}
			rec.expect(t, "Install", "launchctl enable "+target)

			rec.replies = []reply{notLoaded}
			if err := m.Start(ctx); err != nil {
				t.Fatal(err)
			}
			rec.expect(t, "Start (not loaded)", "launchctl print "+target, "launchctl bootstrap "+domain+" "+path)

			rec.replies = []reply{{prefix: "launchctl print", out: launchctlPrintRunning}}
			if err := m.Start(ctx); err != nil {
				t.Fatal(err)
			}
			rec.expect(t, "Start (loaded)", "launchctl print "+target, "launchctl kickstart "+target)

			st, err := m.Status(ctx)
			if err != nil || !st.Running || st.PID != 731 || st.State != "running" || !st.Installed {
				t.Errorf("Status = %+v, %v", st, err)
			}
			rec.take()

			if err := m.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			rec.expect(t, "Restart (loaded)", "launchctl print "+target, "launchctl kickstart -k "+target)

			if err := m.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			rec.expect(t, "Stop (loaded)", "launchctl print "+target, "launchctl bootout "+target)

			rec.replies = []reply{notLoaded}
			if err := m.Stop(ctx); err != nil {
				t.Errorf("Stop when not loaded: %v", err)
			}
			rec.expect(t, "Stop (not loaded)", "launchctl print "+target)
			if err := m.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			rec.expect(t, "Restart (not loaded)", "launchctl print "+target, "launchctl bootstrap "+domain+" "+path)
			st, err = m.Status(ctx)
			if err != nil || st.Running || st.State != "not loaded" || !st.Installed {
				t.Errorf("Status (not loaded) = %+v, %v", st, err)
			}
			rec.take()

			// A print failure that is not "not found" is an error, not "stopped".
			rec.replies = []reply{{prefix: "launchctl print", code: 5, out: "Operation not permitted"}}
			if err := m.Stop(ctx); err == nil {
				t.Error("Stop swallowed a launchctl print failure")
			}
			rec.take()

			rec.replies = []reply{{prefix: "launchctl print", out: launchctlPrintRunning}}
			if _, err := m.Uninstall(ctx); err != nil {
				t.Fatal(err)
			}
			rec.expect(t, "Uninstall", "launchctl print "+target, "launchctl bootout "+target)
			if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("plist still there: %v", err)
			}
			for _, c := range rec.calls {
				if strings.Contains(c, " load") || strings.Contains(c, " unload") {
					t.Errorf("ran legacy %q", c)
				}
			}
		})
	}
}

func TestInstallUserAsRootRefused(t *testing.T) {
	rec := &recorder{}
	m := &Manager{Kind: Systemd, Scope: UserScope, Runner: rec, Dir: t.TempDir(), Geteuid: func() int { return 0 }}
	if _, err := m.Install(context.Background(), []byte("x"), InstallOptions{}); err == nil {
		t.Error("install --user as root accepted")
	}
	rec.expect(t, "refused install")
}

func TestUnitPath(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tt := range []struct {
		kind  ManagerKind
		scope Scope
		env   map[string]string
		want  string
	}{
		{Systemd, SystemScope, nil, "/etc/systemd/system/stateguard-agentd.service"},
		{Systemd, UserScope, map[string]string{"HOME": "/home/a"}, "/home/a/.config/systemd/user/stateguard-agentd.service"},
		{Systemd, UserScope, map[string]string{"HOME": "/home/a", "XDG_CONFIG_HOME": "/x"}, "/x/systemd/user/stateguard-agentd.service"},
		{Launchd, SystemScope, nil, "/Library/LaunchDaemons/com.github.stateguard.agentd.plist"},
		{Launchd, UserScope, map[string]string{"HOME": "/Users/a"}, "/Users/a/Library/LaunchAgents/com.github.stateguard.agentd.plist"},
	} {
		got, err := UnitPath(tt.kind, tt.scope, env(tt.env))
		if err != nil || got != tt.want {
			t.Errorf("UnitPath(%s, %s) = %q, %v; want %q", tt.kind, tt.scope, got, err, tt.want)
		}
	}
	if _, err := UnitPath(Systemd, UserScope, env(nil)); err == nil {
		t.Error("user unit path without HOME accepted")
	}
}

func TestEnsureConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etc", "stateguard", "agent.toml")
	created, err := EnsureConfig(path)
	if err != nil || !created {
		t.Fatalf("EnsureConfig = %v, %v", created, err)
	}
	if _, err := Load(path, true); err != nil {
		t.Errorf("the stub does not load: %v", err)
	}
	os.WriteFile(path, []byte("reconcile = \"5s\"\n"), 0o644)
	if created, err := EnsureConfig(path); err != nil || created {
		t.Errorf("EnsureConfig on an existing file = %v, %v", created, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "reconcile = \"5s\"\n" {
		t.Errorf("EnsureConfig changed an existing file: %q", b)
	}
}
