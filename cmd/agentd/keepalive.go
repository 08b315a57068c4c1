package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/pprof"
	"time"

	"github.com/stateguard/stateguard/internal/sdnotify"
)

// prober is the agent as the keepalive loop sees it.
type prober interface {
	// Alive returns nil when every part of the incident path answered
	// within ctx: the loop that hands out events and every store's
	// worker (one in the middle of a step that is still within its own
	// time budget counts as answering).
	Alive(ctx context.Context) error
	// Summary is the one line systemctl status shows.
	Summary() string
}

// keepalive probes the agent's incident path every period and tells the
// service manager: WATCHDOG=1 only after a probe every part answered,
// STATUS= with the counts or with what does not answer. With exitAfter
// set (launchd, which has no watchdog protocol) an agent unhealthy for
// that long dumps its goroutines and exits, for KeepAlive to restart it.
type keepalive struct {
	notify    *serviceNotify
	probe     prober
	log       *slog.Logger
	period    time.Duration // between probes
	deadline  time.Duration // for one probe
	watchdog  bool          // systemd expects WATCHDOG=1
	exitAfter time.Duration // 0: never exit
	stacks    io.Writer     // where the goroutine dump goes before exiting
	exit      func(code int)
	now       func() time.Time
	pending   chan error // a probe that overran its deadline and has not returned
}

// exitUnhealthy is agentd's exit status when its own watchdog gives up
// (EX_SOFTWARE).
const exitUnhealthy = 70

// keepaliveTiming is the probe period and deadline for a watchdog
// timeout: three probes per timeout, so one slow round never costs a
// restart, and a probe gives up well before the next.
func keepaliveTiming(timeout time.Duration) (period, deadline time.Duration) {
	return timeout / 3, timeout / 6
}

func (k *keepalive) run(ctx context.Context) {
	tick := time.NewTicker(k.period)
	defer tick.Stop()
	var unhealthySince time.Time
	var lastErr string
	for {
		err := k.probeOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		now := k.now()
		if err == nil {
			if !unhealthySince.IsZero() {
				k.log.Info("incident path answers again", "subsystem", "watchdog", "event", eventAgentHealthy,
					"unhealthy_for", now.Sub(unhealthySince).Round(time.Millisecond).String())
			}
			unhealthySince, lastErr = time.Time{}, ""
			msgs := []string{sdnotify.Status(k.probe.Summary())}
			if k.watchdog {
				msgs = append(msgs, sdnotify.Watchdog)
			}
			k.notify.send(msgs...)
		} else {
			if unhealthySince.IsZero() {
				unhealthySince = now
			}
			if err.Error() != lastErr {
				lastErr = err.Error()
				k.log.Error("incident path does not answer; no watchdog keepalive", "subsystem", "watchdog", "event", eventAgentUnhealthy,
					"err", err, "hint", "the service manager restarts agentd when its watchdog runs out; it resumes from the journal")
			}
			k.notify.send(sdnotify.Status("unhealthy: " + err.Error()))
			if k.exitAfter > 0 && now.Sub(unhealthySince) >= k.exitAfter {
				k.giveUp(now.Sub(unhealthySince))
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// probeOnce runs one probe with the deadline on its context. A probe
// waits for the slow parts until then and returns right after, so it is
// given as long again to return; one that does not (it should honour its
// context, but it calls into the part that may be wedged) counts as
// failed, and no second one starts while it is stuck.
func (k *keepalive) probeOnce(ctx context.Context) error {
	if k.pending != nil {
		select {
		case stale := <-k.pending: // the stuck one returned at last; start afresh
			_ = stale // its verdict is about a moment long past
			k.pending = nil
		default:
			return errProbeStuck
		}
	}
	pctx, cancel := context.WithTimeout(ctx, k.deadline)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- k.probe.Alive(pctx) }()
	grace := time.NewTimer(2 * k.deadline)
	defer grace.Stop()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-grace.C:
		k.pending = done
		return fmt.Errorf("liveness probe did not return within %v: %w", 2*k.deadline, errProbeStuck)
	}
}

var errProbeStuck = errors.New("the liveness probe itself is stuck")

func (k *keepalive) giveUp(unhealthyFor time.Duration) {
	k.log.Error("incident path unhealthy too long; exiting for the service manager to restart agentd", "subsystem", "watchdog",
		"event", eventAgentUnhealthy, "unhealthy_for", unhealthyFor.Round(time.Millisecond).String(), "exit", exitUnhealthy)
	if k.stacks != nil {
		fmt.Fprintln(k.stacks, "agentd: goroutines at the watchdog's exit:")
		_ = pprof.Lookup("goroutine").WriteTo(k.stacks, 2)
	}
	k.exit(exitUnhealthy)
}

// Stable event names of the keepalive loop (docs/events.md).
const (
	eventAgentUnhealthy = "agent.unhealthy"
	eventAgentHealthy   = "agent.healthy"
)
