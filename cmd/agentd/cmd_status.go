package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/stateguard/stateguard/service"
)

// exitNotRunning is the LSB status code for "program is not running",
// which init scripts and monitoring already understand.
const exitNotRunning = 3

func cmdStatus(ctx context.Context, args []string, d serviceDeps) int {
	fs := flag.NewFlagSet("agentd status", flag.ContinueOnError)
	fs.SetOutput(d.stderr)
	user := scopeFlag(fs)
	asJSON := fs.Bool("json", false, "print the status as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(d.stderr, "agentd status: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	st, err := d.manager("", scopeOf(*user)).Status(ctx)
	if err != nil {
		return d.fail("status: %v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(d.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return d.fail("status: %v", err)
		}
	} else {
		fmt.Fprintln(d.stdout, describeStatus(st, scopeOf(*user)))
	}
	if !st.Running {
		return exitNotRunning
	}
	return 0
}

func describeStatus(st service.Status, scope service.Scope) string {
	if !st.Installed {
		return fmt.Sprintf("not installed (%s, %s): no %s; run `agentd install%s`", st.Kind, st.Scope, st.Path, userHint(scope))
	}
	s := fmt.Sprintf("%s (%s, %s): %s", st.Path, st.Kind, st.Scope, st.State)
	if st.PID > 0 {
		s += fmt.Sprintf(", pid %d", st.PID)
	}
	return s
}
