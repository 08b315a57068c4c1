package main

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/internal/sdnotify/sdnotifytest"
)

// TestNotifyLifecycle runs agentd as systemd would run the Type=notify
// unit with WatchdogSec=: READY=1 from the main pid once its first check
// covered the store, with STATUS= counting stores, guards, incidents and
// replays; WATCHDOG=1 keepalives; RELOADING=1 then READY=1 around a
// SIGHUP, STOPPING=1 on SIGTERM, and nothing from any other process.
func TestNotifyLifecycle(t *testing.T) {
	rig := newAgentdRig(t, "")
	if err := hermestest.CreateStore(filepath.Join(rig.home, "state.db")); err != nil {
		t.Fatal(err)
	}
	sock := sdnotifytest.Listen(t, true)
	p := rig.start(t, "NOTIFY_SOCKET="+sock.Addr, "WATCHDOG_USEC=900000")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ready, err := sock.WaitFor(ctx, func(m sdnotifytest.Message) bool { return has(m, "READY", "1") })
	if err != nil {
		t.Fatalf("no READY=1: %v", err)
	}
	if ready.PID != p.cmd.Process.Pid {
		t.Errorf("READY=1 came from pid %d, not agentd's %d: NotifyAccess=main would ignore it", ready.PID, p.cmd.Process.Pid)
	}
	const counts = "1 stores watched, 0 guards armed, 0 incidents open, 0 replays queued"
	if s, _ := ready.Get("STATUS"); s != counts {
		t.Errorf("READY=1 with STATUS=%q, want %q", s, counts)
	}
	// The store's first check logs its guard state; READY=1 must not
	// come before it.
	if !p.logHas(`"msg":"guard state"`) {
		t.Errorf("READY=1 before the store's first check:\n%s", p.log())
	}
	keep, err := sock.WaitFor(ctx, func(m sdnotifytest.Message) bool { return has(m, "WATCHDOG", "1") })
	if err != nil {
		t.Fatalf("no WATCHDOG=1 keepalive: %v", err)
	}
	if s, _ := keep.Get("STATUS"); s != counts {
		t.Errorf("keepalive with STATUS=%q, want %q", s, counts)
	}

	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	reloading, err := sock.WaitFor(ctx, func(m sdnotifytest.Message) bool { return has(m, "RELOADING", "1") })
	if err != nil {
		t.Fatalf("no RELOADING=1 after SIGHUP: %v", err)
	}
	if v, ok := reloading.Get("MONOTONIC_USEC"); !ok || v == "" || v == "0" {
		t.Errorf("RELOADING=1 without MONOTONIC_USEC: %q", reloading.Lines)
	}
	if _, err := sock.WaitFor(ctx, func(m sdnotifytest.Message) bool { return has(m, "READY", "1") }); err != nil {
		t.Fatalf("no READY=1 after the reload: %v", err)
	}

	p.stop(t)
	var stopping bool
	for _, m := range sock.All() {
		stopping = stopping || has(m, "STOPPING", "1")
		if m.PID != p.cmd.Process.Pid {
			t.Errorf("message %q from pid %d, not agentd", m.Lines, m.PID)
		}
	}
	if !stopping {
		t.Errorf("no STOPPING=1 before agentd exited")
	}
	if p.err != nil {
		t.Errorf("agentd exited with %v", p.err)
	}
}
