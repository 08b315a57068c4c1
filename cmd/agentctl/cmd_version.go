package main

import (
	"context"
	"flag"
	"io"

	"github.com/stateguard/stateguard/internal/version"
)

func versionUsage(w io.Writer, fs *flag.FlagSet) {
	printUsage(w, fs, `usage: agentctl version [--json]   (also: agentctl --version)

Prints the release or module version, the VCS revision the binary was built
from, the Go version and the SQLite embedded in it. Reads nothing else, so it
works without agentd and without privileges.
`, "")
}

func runVersion(ctx context.Context, e *env, args []string) int {
	v := newVerb(e, "version", versionUsage)
	asJSON := v.fs.Bool("json", false, "print a stable JSON document (its shape is in internal/version)")
	if _, code, ok := v.parseN(args, 0); !ok {
		return code
	}
	info, err := version.Read(ctx)
	doc := version.NewDocument("agentctl", info, err)
	if *asJSON {
		err = doc.WriteJSON(e.stdout)
	} else {
		err = doc.WriteText(e.stdout)
	}
	if err != nil {
		return v.fail(err)
	}
	return exitOK
}
