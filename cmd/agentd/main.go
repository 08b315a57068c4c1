package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// verb is one agentd subcommand; each lives in its own cmd_<verb>.go and
// registers itself from init.
type verb struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) int
}

var verbs = map[string]verb{}

func register(v verb) {
	if _, dup := verbs[v.name]; dup {
		panic("agentd: verb registered twice: " + v.name)
	}
	verbs[v.name] = v
}

func main() {
	os.Exit(runCLI(os.Args[1:], os.Stderr))
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
	v, ok := verbs[args[0]]
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
	names := make([]string, 0, len(verbs))
	for n := range verbs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, verbs[n].summary)
	}
}
