package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/stateguard/stateguard/service"
	"github.com/stateguard/stateguard/supervisor"
)

func init() {
	register(verb{name: "run", summary: "run the agent in the foreground", run: cmdRun})
}

func cmdRun(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("agentd run", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file (default "+service.SystemConfigPath+" as root, $XDG_CONFIG_HOME/stateguard/agent.toml otherwise)")
	stateDir := fs.String("state-dir", "", "state directory (overrides the config)")
	socket := fs.String("socket", "", `control socket path (overrides the config; "-" for none)`)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	explicit := *configPath != ""
	path := *configPath
	if !explicit {
		path = service.DefaultConfigPath(os.Getenv, os.Geteuid())
	}
	cfg, err := service.Load(path, explicit)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentd: %v\n", err)
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
	log := service.NewLogger(os.Stderr, cfg.Log)
	agent, err := supervisor.Start(ctx, cfg.AgentOptions(log))
	if err != nil {
		log.Error("agent did not start", "err", err)
		return 1
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			next, err := service.Load(path, explicit)
			if err != nil {
				log.Error("config reload refused; keeping the running config", "err", err)
				continue
			}
			override(next)
			agent.Reload(next.AgentOptions(log))
		case <-ctx.Done():
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
