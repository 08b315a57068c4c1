package service

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageUnit: the unit the packages ship comes from the same template
// as `agentd install`, names the packaged paths, makes the parents of
// Hermes homes writable (a package cannot know the host's homes), and
// passes systemd-analyze verify.
func TestPackageUnit(t *testing.T) {
	spec := PackageSpec()
	unit, err := spec.Render()
	if err != nil {
		t.Fatal(err)
	}
	s := unitSections(t, unit)
	if got := s["Service"]["ExecStart"]; len(got) != 1 || got[0] != "/usr/bin/agentd run --config /etc/stateguard/agent.toml" {
		t.Errorf("ExecStart = %q", got)
	}
	if got := strings.Join(s["Service"]["ReadWritePaths"], " "); got != "-/home -/root" {
		t.Errorf("ReadWritePaths = %q", got)
	}
	for _, key := range []string{"ProtectSystem", "CapabilityBoundingSet", "StateDirectory", "RuntimeDirectory"} {
		if len(s["Service"][key]) != 1 {
			t.Errorf("the packaged unit lacks %s: it must be the hardened system unit", key)
		}
	}
	if !strings.HasPrefix(string(unit), "# stateguard agent (system-wide), shipped by the stateguard package") ||
		strings.Contains(string(unit), "written by `agentd install`") {
		t.Errorf("header does not say the package ships it:\n%s", unit)
	}

	// systemd-analyze verify wants ExecStart's program to exist; on a
	// build machine /usr/bin/agentd usually does not. CI verifies the
	// installed unit with the installed binary too.
	spec.Executable = testExecutable(t)
	unit, err = spec.Render()
	if err != nil {
		t.Fatal(err)
	}
	verify(t, unit, false)
}

// TestManagerFindsPackagedUnit: with only the package's unit installed,
// start/stop/status work on it and uninstall refuses (the package owns
// it); `agentd install` writes an override into /etc, and uninstalling
// that leaves the package's unit in effect again.
func TestManagerFindsPackagedUnit(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	pkgDir := filepath.Join(base, "usr", "lib", "systemd", "system")
	if err := os.MkdirAll(pkgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	packaged := filepath.Join(pkgDir, UnitName)
	if err := os.WriteFile(packaged, []byte("[Service]\nExecStart=/usr/bin/agentd run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{replies: []reply{{prefix: "systemctl show", out: "LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=42\n"}}}
	m := &Manager{Kind: Systemd, Scope: SystemScope, Runner: rec, Dir: filepath.Join(base, "etc", "systemd", "system"),
		PackageDir: pkgDir, Geteuid: func() int { return 0 }}
	override, _ := m.Path()

	if err := m.Start(ctx); err != nil {
		t.Fatalf("Start with the packaged unit: %v", err)
	}
	rec.expect(t, "Start", "systemctl start "+UnitName)
	st, err := m.Status(ctx)
	if err != nil || !st.Installed || !st.Running || st.Path != packaged {
		t.Errorf("Status = %+v, %v; want the packaged unit, running", st, err)
	}
	rec.take()
	if _, err := m.Uninstall(ctx); err == nil || !strings.Contains(err.Error(), "package") {
		t.Errorf("Uninstall of the packaged unit = %v, want a refusal naming the package", err)
	}
	rec.expect(t, "refused Uninstall")
	if _, err := os.Stat(packaged); err != nil {
		t.Fatalf("the packaged unit is gone: %v", err)
	}

	// --refresh on a packaged install: the drop-in goes into /etc, next
	// to where an override would be, and the packaged unit stays.
	spec := PackageSpec()
	spec.ReadWritePaths = append(spec.ReadWritePaths, "-/srv")
	dropIn, err := spec.RenderHomesDropIn()
	if err != nil {
		t.Fatal(err)
	}
	where, err := m.WriteHomesDropIn(ctx, dropIn)
	if err != nil || where != filepath.Join(filepath.Dir(override), UnitName+".d", HomesDropIn) {
		t.Fatalf("WriteHomesDropIn = %s, %v", where, err)
	}
	rec.expect(t, "WriteHomesDropIn", "systemctl daemon-reload")
	if b, _ := os.ReadFile(where); !strings.Contains(string(b), "ReadWritePaths=-/srv\n") {
		t.Errorf("drop-in:\n%s", b)
	}

	if _, err := m.Install(ctx, []byte("[Service]\nExecStart=/usr/bin/agentd run --config /etc/x.toml\n"), InstallOptions{}); err != nil {
		t.Fatalf("Install over the packaged unit: %v", err)
	}
	rec.take()
	if st, _ := m.Status(ctx); st.Path != override {
		t.Errorf("Status path %s, want the override %s", st.Path, override)
	}
	rec.take()
	if _, err := m.Uninstall(ctx); err != nil {
		t.Fatalf("Uninstall of the override: %v", err)
	}
	rec.take()
	if st, _ := m.Status(ctx); st.Path != packaged || !st.Installed {
		t.Errorf("after removing the override: %+v, want the packaged unit", st)
	}
}
