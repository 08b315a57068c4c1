package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/stateguard/stateguard/supervisor"
)

// agentProbe is the running agent as the keepalive loop probes it: a
// liveness tick through every store's worker, the loop that runs its
// incidents.
type agentProbe struct {
	a      *supervisor.Agent
	budget time.Duration // how long one step may keep a worker from answering
}

func (p agentProbe) Alive(ctx context.Context) error { return p.a.Alive(ctx, p.budget) }

func (p agentProbe) Summary() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := p.a.Summary(ctx)
	if err != nil {
		return s.String() + " (replay queue unknown: " + err.Error() + ")"
	}
	return s.String()
}

// statusPeriod is how often STATUS= is refreshed without a watchdog.
const statusPeriod = 30 * time.Second

// startKeepalive starts the keepalive loop when anyone listens: systemd's
// watchdog (WATCHDOG=1 and STATUS=), a notify socket alone (STATUS=), or
// selfWatchdog (launchd: exit when unhealthy that long). It returns a
// function that stops the loop and waits for it.
func startKeepalive(ctx context.Context, a *supervisor.Agent, notify *serviceNotify, log *slog.Logger, selfWatchdog time.Duration) (stop func()) {
	timeout := notify.watchdog
	if timeout == 0 {
		timeout = selfWatchdog
	}
	if timeout == 0 && !notify.n.Enabled() {
		return func() {}
	}
	// Without a watchdog only the status line is kept fresh, and a step
	// is never judged too long.
	period, deadline, budget := statusPeriod, statusPeriod/2, time.Duration(1<<62)
	if timeout > 0 {
		period, deadline = keepaliveTiming(timeout)
		budget = timeout / 2
	}
	k := &keepalive{
		notify: notify, probe: agentProbe{a: a, budget: budget}, log: log,
		period: period, deadline: deadline, watchdog: notify.watchdog > 0,
		stacks: os.Stderr, exit: os.Exit, now: time.Now,
	}
	if notify.watchdog == 0 {
		// systemd's watchdog restarts agentd itself (SIGABRT, with a
		// core dump); only without one does agentd exit on its own.
		k.exitAfter = selfWatchdog
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); k.run(ctx) }()
	return func() { cancel(); <-done }
}
