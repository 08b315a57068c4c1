package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/stateguard/stateguard/alert"
	"github.com/stateguard/stateguard/internal/sdnotify"
	"github.com/stateguard/stateguard/internal/version"
	"github.com/stateguard/stateguard/service"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/supervisor"
)

func cmdRun(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("agentd run", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file (default "+service.SystemConfigPath+" as root, $XDG_CONFIG_HOME/stateguard/agent.toml otherwise)")
	stateDir := fs.String("state-dir", "", "state directory (overrides the config)")
	socket := fs.String("socket", "", `control socket path (overrides the config; "-" for none)`)
	watchdog := fs.Duration("watchdog", 0, "exit (status 70) when the incident path has not answered for this long, for a service manager without a watchdog protocol (launchd's KeepAlive) to restart agentd; 0: off. Under systemd, WatchdogSec= does this")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// The fds the service manager kept for the previous agent (its
	// incidents' pins, fds 3 and up), marked close-on-exec before any
	// command agentd runs could inherit them.
	passed, listenErr := sdnotify.ListenFDs(os.Getenv, os.Getpid())
	prof := startProfiler()
	defer prof.stopCPU()
	if err := requireSQLite(ctx, version.SQLite); err != nil {
		fmt.Fprintf(termErr, "agentd: refusing to start: %v\n", err)
		return 1
	}
	explicit := *configPath != ""
	path := *configPath
	if !explicit {
		path = service.DefaultConfigPath(os.Getenv, os.Geteuid())
	}
	cfg, err := service.Load(path, explicit)
	if err != nil {
		fmt.Fprintf(termErr, "agentd: %v\n", err)
		return 1
	}
	override := func(c *service.Config) {
		if *stateDir != "" {
			c.StateDir = *stateDir
		}
		if *socket != "" {
			c.Socket = *socket
		}
	}
	override(cfg)
	var metrics *supervisor.Metrics
	if cfg.Metrics.Listen != "" {
		metrics = supervisor.NewMetrics()
		// An unknown SQLite version cannot be: requireSQLite read it.
		info, _ := version.Read(ctx)
		metrics.BuildInfo(info.BuildInfoLabels())
	}
	// STATEGUARD_JOURNAL_SOCKET points the journal handler at another
	// socket: the tests' fake journald.
	out := service.LogOutput{JournalSocket: os.Getenv("STATEGUARD_JOURNAL_SOCKET")}
	log, alerter := newLogging(out, cfg, metrics)
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = alerter.Close(closeCtx)
		cancel()
	}()
	slog.SetDefault(log) // packages that log without a logger of their own
	if listenErr != nil {
		log.Warn("fds the service manager passed not all taken", "subsystem", "notify", "err", listenErr)
	}
	notify := newServiceNotify(log)
	keeper := supervisor.NewPinKeeper(notify.n, passed, log)
	opts := func(c *service.Config) supervisor.Options {
		o := agentOptions(c, log)
		o.Keeper = keeper
		o.Metrics, o.MetricsListen = metrics, c.Metrics.Listen
		if c.Stall.Timeout.D > 0 {
			o.Stall = supervisor.NewStallWatch(supervisor.StallConfig{Timeout: c.Stall.Timeout.D, Metrics: metrics})
		}
		return o
	}
	// Before READY=1: systemd may send SIGHUP (systemctl reload) as soon
	// as it has it, and SIGHUP's default action would end the agent.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	agent, err := supervisor.Start(ctx, opts(cfg))
	if err != nil {
		log.Error("agent did not start", "err", err)
		return 1
	}
	// READY=1 only once every store has had its first check: until then
	// a store's generation is unknown and a change to it goes unseen.
	if err := agent.Covered(ctx); err != nil && ctx.Err() == nil {
		log.Warn("not every store had its first check before READY=1", "subsystem", "notify", "err", err)
	}
	prof.started()
	notify.send(sdnotify.Ready, sdnotify.Status(agentProbe{a: agent}.Summary()))
	stopKeepalive := startKeepalive(ctx, agent, notify, log, *watchdog)
	defer stopKeepalive()
	for {
		select {
		case <-hup:
			notify.send(sdnotify.Reloading())
			next, err := service.Load(path, explicit)
			if err != nil {
				log.Error("config reload refused; keeping the running config", "err", err)
				notify.send(sdnotify.Ready)
				continue
			}
			override(next)
			agent.Reload(opts(next))
			notify.send(sdnotify.Ready)
		case <-ctx.Done():
			prof.stopping()
			stopKeepalive()
			notify.send(sdnotify.Stopping)
			closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := agent.Close(closeCtx)
			cancel()
			if err != nil {
				log.Error("agent stopped with errors", "err", err)
				return 1
			}
			return 0
		}
	}
}

// newLogging is agentd's logger: records at the configured level go to
// out (the journal under systemd, JSON or text elsewhere), and every event
// record at info or above also goes to the alert command, whatever the log
// level (alert.Handler keeps the two paths apart).
func newLogging(out service.LogOutput, cfg *service.Config, metrics *supervisor.Metrics) (*slog.Logger, *alert.Alerter) {
	base, _ := out.Logger(cfg.Log)
	var counter alert.Counter
	if metrics != nil {
		counter = metrics
	}
	alerter := alert.New(alert.Config{
		Exec: cfg.Alert.Exec, Timeout: cfg.Alert.Timeout.D, Concurrency: cfg.Alert.Concurrency,
		RateLimit: cfg.Alert.RateLimit.D, Quiet: supervisor.QuietEvents(), Metrics: counter,
	}, base)
	return slog.New(alert.Handler(base.Handler(), alerter)), alerter
}

// requireSQLite refuses an embedded SQLite older than
// store.MinSQLiteVersion: the agent relies on its WAL-reset fix.
func requireSQLite(ctx context.Context, version func(context.Context) (string, error)) error {
	v, err := version(ctx)
	if err != nil {
		return fmt.Errorf("cannot ask the embedded SQLite its version: %w", err)
	}
	return store.CheckSQLiteVersion(v)
}
