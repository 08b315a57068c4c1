package main

import (
	"context"
	"flag"
	"fmt"
)

// cmdUninstall leaves the config file, the state directory (the journal,
// which may hold unfinished incidents) and every capture in place.
func cmdUninstall(ctx context.Context, args []string, d serviceDeps) int {
	fs := flag.NewFlagSet("agentd uninstall", flag.ContinueOnError)
	fs.SetOutput(d.stderr)
	user := scopeFlag(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(d.stderr, "agentd uninstall: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	path, err := d.manager("", scopeOf(*user)).Uninstall(ctx)
	if err != nil {
		return d.fail("uninstall: %v", err)
	}
	fmt.Fprintf(d.stdout, "removed %s; the config, the state directory and any captures are kept\n", path)
	return 0
}
