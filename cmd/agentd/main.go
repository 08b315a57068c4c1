package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/stateguard/stateguard/internal/termsafe"
	"github.com/stateguard/stateguard/service"
	"github.com/stateguard/stateguard/store"
)

// verb is one agentd subcommand; its code lives in cmd_<verb>.go.
type verb struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) int
}

// verbs is every verb, in the order usage lists them.
var verbs = []verb{
	{"run", "run the agent in the foreground", cmdRun},
	{"install", "install agentd as a service (system-wide, or --user); --print shows the unit", func(ctx context.Context, args []string) int {
		return cmdInstall(ctx, args, defaultServiceDeps())
	}},
	{"uninstall", "stop the service and remove its unit or plist", func(ctx context.Context, args []string) int {
		return cmdUninstall(ctx, args, defaultServiceDeps())
	}},
	{"start", "start the installed service", func(ctx context.Context, args []string) int {
		return controlVerb(ctx, "start", args, defaultServiceDeps(), (*service.Manager).Start)
	}},
	{"stop", "stop the service (it stays installed)", func(ctx context.Context, args []string) int {
		return controlVerb(ctx, "stop", args, defaultServiceDeps(), (*service.Manager).Stop)
	}},
	{"restart", "restart the service (start it if stopped)", func(ctx context.Context, args []string) int {
		return controlVerb(ctx, "restart", args, defaultServiceDeps(), (*service.Manager).Restart)
	}},
	{"status", "what the service manager says about agentd (exit 0 running, 3 not running)", func(ctx context.Context, args []string) int {
		return cmdStatus(ctx, args, defaultServiceDeps())
	}},
	{"version", "the build: version, VCS revision, Go, embedded SQLite (--json)", func(ctx context.Context, args []string) int {
		return cmdVersion(ctx, args, termOut, termErr)
	}},
}

// termOut and termErr are agentd's own text output: a path or an error
// quoting one may carry another user's control characters, escaped on
// the way (internal/termsafe). The log escapes its own (service.LogOutput).
var termOut, termErr io.Writer = termsafe.NewWriter(os.Stdout), termsafe.NewWriter(os.Stderr)

func main() {
	// Process-wide switches, set once before anything opens SQLite.
	if err := store.UseOFDLocks(); err != nil {
		fmt.Fprintf(termErr, "agentd: %v\n", err)
	}
	setGCPercent(os.Getenv)
	os.Exit(runCLI(os.Args[1:], termErr))
}

// agentGOGC is the collector's target unless $GOGC says otherwise. The
// agent's heap is almost all long-lived per-store state (10,000 stores:
// ~45 MB) and an idle agent allocates little (a few MB a reconcile), so
// collecting when the heap has grown by half of it, not all of it, keeps
// the resident size near 1.5x the live heap for about one more collection
// every few reconciles.
const agentGOGC = 50

func setGCPercent(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(agentGOGC)
	}
}

func lookup(name string) (verb, bool) {
	for _, v := range verbs {
		if v.name == name {
			return v, true
		}
	}
	return verb{}, false
}

func runCLI(args []string, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" {
		args = append([]string{"version"}, args[1:]...)
	}
	v, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "agentd: unknown verb %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	// SIGHUP is not in this set: `run` handles it as "reload config".
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return v.run(ctx, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: agentd <verb> [flags]")
	fmt.Fprintln(w)
	for _, v := range verbs {
		fmt.Fprintf(w, "  %-10s %s\n", v.name, v.summary)
	}
}
