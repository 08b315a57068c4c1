package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/stateguard/stateguard/internal/version"
)

func runVersion(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("agentctl version", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	asJSON := fs.Bool("json", false, "print a stable JSON document (its shape is in internal/version)")
	fs.Usage = func() {
		printUsage(e.stderr, fs, `usage: agentctl version [--json]   (also: agentctl --version)

Prints the release or module version, the VCS revision the binary was built
from, the Go version and the SQLite embedded in it. Reads nothing else, so it
works without agentd and without privileges.
`, "")
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "agentctl version: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	info, err := version.Read(ctx)
	doc := version.NewDocument("agentctl", info, err)
	if *asJSON {
		err = doc.WriteJSON(e.stdout)
	} else {
		err = doc.WriteText(e.stdout)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "agentctl version: %v\n", err)
		return exitError
	}
	return exitOK
}
