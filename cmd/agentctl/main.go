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

// Exit codes, as docs/design.md gives them.
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitRefused = 3
	exitPartial = 4
)

// command is one agentctl verb. Each lives in its own cmd_<verb>.go and
// registers itself from init, so verbs never edit a shared table.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) int
}

// env is what a verb may touch of the outside world; tests run verbs with
// their own buffers.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("agentctl: verb registered twice: " + c.name)
	}
	commands[c.name] = c
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runCLI(ctx, &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

func runCLI(ctx context.Context, e *env, args []string) int {
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
	c, ok := commands[args[0]]
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
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Exit codes: 0 ok, 1 error, 2 usage, 3 refused (unsafe), 4 partial.")
}
