package sdnotify_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/sdnotify"
	"github.com/stateguard/stateguard/internal/sdnotify/sdnotifytest"
)

func TestNewAddresses(t *testing.T) {
	if n, err := sdnotify.New(""); n != nil || err != nil {
		t.Errorf("New(\"\") = %v, %v; want nil, nil (not under systemd)", n, err)
	}
	var nilN *sdnotify.Notifier
	if err := nilN.Notify(sdnotify.Ready); err != nil || nilN.Enabled() {
		t.Errorf("nil Notifier: Notify = %v, Enabled = %v", err, nilN.Enabled())
	}
	for _, ok := range []string{"/run/systemd/notify", "@/org/freedesktop/systemd1/notify/123"} {
		if n, err := sdnotify.New(ok); err != nil || n.Socket() != ok {
			t.Errorf("New(%q) = %v, %v", ok, n, err)
		}
	}
	for _, bad := range []string{"run/notify", "vsock:2:1234"} {
		if _, err := sdnotify.New(bad); err == nil || !strings.Contains(err.Error(), sdnotify.EnvSocket) {
			t.Errorf("New(%q) = %v; want an error naming %s", bad, err, sdnotify.EnvSocket)
		}
	}
}

func TestNotifyOneDatagram(t *testing.T) {
	cases := []bool{false}
	if runtime.GOOS == "linux" {
		cases = append(cases, true)
	}
	for _, abstract := range cases {
		t.Run(map[bool]string{false: "path", true: "abstract"}[abstract], func(t *testing.T) {
			sock := sdnotifytest.Listen(t, abstract)
			n, err := sdnotify.FromEnv(func(k string) string {
				return map[string]string{sdnotify.EnvSocket: sock.Addr}[k]
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Notify(sdnotify.Ready, sdnotify.Status("3 stores\nwatched")); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m, err := sock.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"READY=1", "STATUS=3 stores watched"}; strings.Join(m.Lines, "|") != strings.Join(want, "|") {
				t.Errorf("datagram = %q, want %q", m.Lines, want)
			}
			if runtime.GOOS == "linux" && m.PID != os.Getpid() {
				t.Errorf("sender pid %d, want this process %d (NotifyAccess=main accepts only the main pid)", m.PID, os.Getpid())
			}
		})
	}
}

func TestReloadingCarriesMonotonicTime(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("MONOTONIC_USEC is read from CLOCK_MONOTONIC on Linux only")
	}
	lines := strings.Split(sdnotify.Reloading(), "\n")
	if len(lines) != 2 || lines[0] != "RELOADING=1" || !strings.HasPrefix(lines[1], "MONOTONIC_USEC=") {
		t.Fatalf("Reloading() = %q", lines)
	}
	usec, err := strconv.ParseInt(strings.TrimPrefix(lines[1], "MONOTONIC_USEC="), 10, 64)
	if err != nil || usec <= 0 {
		t.Fatalf("MONOTONIC_USEC %q: %v", lines[1], err)
	}
	// CLOCK_MONOTONIC counts from boot, like /proc/uptime's first field.
	up, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Skip(err)
	}
	secs, _ := strconv.ParseFloat(strings.Fields(string(up))[0], 64)
	if d := float64(usec)/1e6 - secs; d < -5 || d > 5 {
		t.Errorf("MONOTONIC_USEC=%d is %.1f s off the uptime %.1f s: not CLOCK_MONOTONIC", usec, d, secs)
	}
}

func TestNotifyNoListener(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gone")
	n, _ := sdnotify.New(path)
	err := n.Notify(sdnotify.Watchdog)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Notify to a missing socket = %v; want an error naming %s", err, path)
	}
}

func TestWatchdogInterval(t *testing.T) {
	pid := 4242
	for _, tt := range []struct {
		usec, pid string
		want      time.Duration
		bad       bool
	}{
		{"", "", 0, false},
		{"30000000", "", 30 * time.Second, false},
		{"30000000", "4242", 30 * time.Second, false},
		{"30000000", "1", 0, false}, // meant for another process
		{"0", "", 0, true},
		{"-5", "", 0, true},
		{"30s", "", 0, true},
		{"30000000", "x", 0, true},
		{"99999999999999999999", "", 0, true},
	} {
		env := map[string]string{sdnotify.EnvWatchdogUsec: tt.usec, sdnotify.EnvWatchdogPID: tt.pid}
		got, err := sdnotify.WatchdogInterval(func(k string) string { return env[k] }, pid)
		if tt.bad {
			if !errors.Is(err, sdnotify.ErrWatchdogValue) {
				t.Errorf("USEC=%q PID=%q: err = %v, want ErrWatchdogValue", tt.usec, tt.pid, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("USEC=%q PID=%q: %v, %v; want %v", tt.usec, tt.pid, got, err, tt.want)
		}
	}
}

func TestUnsetenv(t *testing.T) {
	for _, k := range []string{sdnotify.EnvSocket, sdnotify.EnvWatchdogUsec, sdnotify.EnvWatchdogPID} {
		t.Setenv(k, "x")
	}
	sdnotify.Unsetenv()
	for _, k := range []string{sdnotify.EnvSocket, sdnotify.EnvWatchdogUsec, sdnotify.EnvWatchdogPID} {
		if v, ok := os.LookupEnv(k); ok {
			t.Errorf("%s=%q still set", k, v)
		}
	}
}
