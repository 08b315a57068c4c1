package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/stateguard/stateguard/internal/version"
)

func cmdVersion(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agentd version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print a stable JSON document (its shape is in internal/version)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: agentd version [--json]   (also: agentd --version)")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Prints the release or module version, the VCS revision the binary was built")
		fmt.Fprintln(stderr, "from, the Go version and the SQLite embedded in it.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "agentd version: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	info, err := version.Read(ctx)
	doc := version.NewDocument("agentd", info, err)
	if *asJSON {
		err = doc.WriteJSON(stdout)
	} else {
		err = doc.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "agentd version: %v\n", err)
		return 1
	}
	return 0
}
