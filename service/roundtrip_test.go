package service

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSystemdRoundTrip installs, starts, inspects, stops and uninstalls a
// real system unit. It needs systemd as PID 1 and root; elsewhere the
// recorded-command tests above cover what each verb runs.
func TestSystemdRoundTrip(t *testing.T) {
	comm, _ := os.ReadFile("/proc/1/comm")
	if strings.TrimSpace(string(comm)) != "systemd" {
		t.Skipf("PID 1 is %q, not systemd: no service manager to round-trip with here", strings.TrimSpace(string(comm)))
	}
	if os.Geteuid() != 0 {
		t.Skip("installing a system unit needs root")
	}
	kind, err := Detect()
	if err != nil || kind != Systemd {
		t.Skipf("kardianos/service does not detect systemd: %v", err)
	}
	m := &Manager{Kind: Systemd}
	path, _ := m.Path()
	if _, err := os.Lstat(path); err == nil {
		t.Skipf("%s exists: a real installation; not touching it", path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The unit hides /tmp (PrivateTmp), so the stand-in for agentd lives
	// under /var/lib. It ignores `run --config ...` and waits.
	dir, err := os.MkdirTemp("/var/lib", "stateguard-roundtrip-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	exe := filepath.Join(dir, "agentd")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexec sleep 3600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "agent.toml")
	if _, err := EnsureConfig(cfgPath); err != nil {
		t.Fatal(err)
	}
	spec, _, err := BuildSpec(SpecOptions{Kind: Systemd, ConfigPath: cfgPath, Executable: exe,
		Config: &Config{Homes: []string{dir}}})
	if err != nil {
		t.Fatal(err)
	}
	unit, err := spec.Render()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Install(ctx, unit, InstallOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Uninstall(context.Background()) })

	waitStatus := func(running bool) Status {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, err := m.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Running == running || time.Now().After(deadline) {
				return st
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if st := waitStatus(false); !st.Installed || st.Running {
		t.Fatalf("after install: %+v", st)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(true)
	if !st.Running || st.PID <= 0 {
		t.Fatalf("after start: %+v", st)
	}
	if err := m.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if st2 := waitStatus(true); st2.PID == st.PID {
		t.Errorf("restart kept pid %d", st.PID)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := waitStatus(false); st.Running {
		t.Fatalf("after stop: %+v", st)
	}
	if _, err := m.Uninstall(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := m.Status(ctx); err != nil || st.Installed {
		t.Errorf("after uninstall: %+v, %v", st, err)
	}
}
