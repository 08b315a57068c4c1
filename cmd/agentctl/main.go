package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/internal/termsafe"
	"github.com/stateguard/stateguard/store"
)

// Exit codes, as docs/design.md gives them.
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitRefused = 3
	exitPartial = 4
)

// command is one agentctl verb; its code lives in cmd_<verb>.go.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) int
}

// commands is every verb, in the order usage lists them.
var commands = []command{
	{"status", "stores, generations, holders and incidents (exit 3: orphan holder or unknown scan)", runStatus},
	{"holders", "one line per process holding a store, for scripts", runHolders},
	{"incidents", "list open incidents (--all: every incident)", runIncidents},
	{"incident", "incident show ID: one incident with every journaled step", runIncident},
	{"release", "release ID --resume|--terminate|--kill: decide for a held incident", runRelease},
	{"replay", "replay a diverted JSONL into its store, exactly once", runReplay},
	{"queue", "list replay jobs and where they are", runQueue},
	{"restore", "restore a store from a backup without orphaning anyone", runRestore},
	{"adopt", "move a session (and its lineage) created in the wrong profile into another", runAdopt},
	{"export", "write a session as JSON, Markdown or one HTML page, from a store or a capture", runExport},
	{"guard", "off|on --profile P [--home H] [--for 15m]: pause the guard for maintenance, or re-arm it", runGuard},
	{"doctor", "check the host, the config, the daemon and every store; explain what to fix", runDoctorVerb},
	{"version", "the build: version, VCS revision, Go, embedded SQLite (--json)", runVersion},
}

// env is what a verb may touch of the outside world; tests run verbs with
// their own buffers, environment and seams.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// data is where a verb writes a file's bytes to stdout (export's
	// JSON, Markdown or HTML) when stdout is a file or a pipe: those bytes
	// must stay exact. nil means stdout, a terminal or a test's buffer:
	// escaped as all text is.
	data   io.Writer
	getenv func(string) string
	// scan is how restore learns who holds a store, judged by rule.
	scan func(path string, rule holders.Rule) (*holders.StoreResult, error)
	// queueReplay asks a running agentd to queue a replay and reports
	// whether it did; nil replays in this process, as with --now.
	queueReplay func(ctx context.Context, e *env, req replayRequest) (queued bool, err error)
	// describe, when set, makes a verb hand over its flags instead of
	// running: the completion scripts are built from the verbs' own flags.
	describe func(fs *flag.FlagSet)
}

// newEnv is agentctl's environment around the given streams: the real
// holder scan, and replays queued with a running agentd.
func newEnv(stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) *env {
	return &env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv, scan: scanHolders, queueReplay: queueWithDaemon}
}

func main() {
	// Process-wide: before the first SQLite open, as agentd does, so the
	// locks agentctl's connections take never fight agentd's.
	if err := store.UseOFDLocks(); err != nil {
		fmt.Fprintf(os.Stderr, "agentctl: %v\n", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	e := newEnv(os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice == 0 {
		e.data = os.Stdout
	}
	code := runCLI(ctx, e, os.Args[1:])
	stop()
	os.Exit(code)
}

// shellCommands complete the others (cmd_completion.go); apart, since
// they read commands. completeVerb is hidden: the scripts call it.
var shellCommands = []command{
	{"completion", completionSummary, runCompletion},
	{completeVerb, "", runComplete},
}

func lookup(name string) (command, bool) {
	for _, c := range append(commands[:len(commands):len(commands)], shellCommands...) {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// runCLI runs a verb with its text output escaped (termsafe.Writer): a
// holder's command line, a profile name or a path is another user's text,
// and no control character of it may reach the operator's terminal.
func runCLI(ctx context.Context, e *env, args []string) int {
	out, errOut := termsafe.NewWriter(e.stdout), termsafe.NewWriter(e.stderr)
	defer out.Flush()
	defer errOut.Flush()
	safe := *e
	safe.stdout, safe.stderr = out, errOut
	return runVerb(ctx, &safe, args)
}

func runVerb(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(e.stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if args[0] == "--version" {
		args = append([]string{"version"}, args[1:]...)
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(e.stderr, "agentctl: unknown verb %q\n\n", args[0])
		usage(e.stderr)
		return exitUsage
	}
	return c.run(ctx, e, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: agentctl <verb> [flags]")
	fmt.Fprintln(w)
	for _, c := range append(commands[:len(commands):len(commands)], shellCommands...) {
		if c.summary != "" {
			fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Exit codes: 0 ok, 1 error, 2 usage, 3 refused (unsafe), 4 partial.")
}
