package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/stateguard/stateguard/control"
)

func guardUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: agentctl guard off --profile P [--home H] | --db PATH [--for 15m] [--reason TEXT] [--socket PATH]")
	fmt.Fprintln(w, "       agentctl guard on  --profile P [--home H] | --db PATH [--socket PATH]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The guard holds read locks on every live Hermes store in WAL mode, so no")
	fmt.Fprintln(w, "process that wrongly believes it is the last connection can checkpoint and")
	fmt.Fprintln(w, "unlink the WAL under a live writer. While it is armed, `PRAGMA")
	fmt.Fprintln(w, "journal_mode=DELETE` and maintenance that must be the store's only holder")
	fmt.Fprintln(w, "cannot run. `guard off` pauses it for one store (journaled; it re-arms by")
	fmt.Fprintln(w, "itself when the pause runs out, at most 24h); `guard on` re-arms it now.")
	fmt.Fprintln(w, "Needs a running agentd.")
	fmt.Fprintln(w)
	fs.PrintDefaults()
}

func runGuard(ctx context.Context, e *env, args []string) int {
	v := newVerb(e, "guard", guardUsage)
	fs := v.fs
	socket := fs.String("socket", "", "agentd control socket (default $"+socketEnv+", else the agent's default)")
	profile := fs.String("profile", "", "Hermes profile whose store to pause or re-arm (\"default\" for <home>/state.db)")
	home := fs.String("home", "", "Hermes home of the profile (needed when several watched homes have it)")
	db := fs.String("db", "", "the store's path, for a store outside any profile")
	pauseFor := fs.Duration("for", control.DefaultGuardPause, "guard off: how long the pause lasts")
	reason := fs.String("reason", "", "guard off: why, for status and the journal")
	pos, code, ok := v.parseN(args, 1)
	if !ok {
		return code
	}
	verb := pos[0]
	switch {
	case verb != "off" && verb != "on":
		return v.usageError(fmt.Sprintf("unknown action %q: want off or on", verb))
	case (*profile == "") == (*db == ""):
		return v.usageError("name the store with exactly one of --profile and --db")
	case *db != "" && *home != "":
		return v.usageError("--home goes with --profile, not --db")
	case verb == "off" && (*pauseFor <= 0 || *pauseFor > control.MaxGuardPause):
		return v.usageError(fmt.Sprintf("--for %s: want a duration above 0 and at most %s", *pauseFor, control.MaxGuardPause))
	}
	req := control.GuardRequest{Profile: *profile, Reason: *reason}
	var err error
	if *db != "" {
		if req.Store, err = filepath.Abs(*db); err != nil {
			return v.usageError(err.Error())
		}
	}
	if *home != "" {
		if req.Home, err = filepath.Abs(*home); err != nil {
			return v.usageError(err.Error())
		}
	}
	path := "/v1/guard/resume"
	if verb == "off" {
		path = "/v1/guard/pause"
		req.For = pauseFor.String()
	}
	var ans control.GuardAnswer
	err = newClient(socketPath(*socket, e.getenv)).post(ctx, path, req, &ans)
	if errors.Is(err, errDaemonNotRunning) {
		fmt.Fprintf(e.stderr, "agentctl guard %s: %v; without agentd no guard is held, so there is nothing to pause or re-arm\n", verb, err)
		return exitError
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "agentctl guard %s: %v\n", verb, err)
		return exitError
	}
	name := ans.Store
	if ans.Profile != "" {
		name = fmt.Sprintf("%s (profile %s)", ans.Store, ans.Profile)
	}
	state := "unknown"
	if ans.Guard != nil {
		state = ans.Guard.State
		if ans.Guard.Reason != "" && state != control.GuardPaused {
			state += " (" + ans.Guard.Reason + ")"
		}
	}
	if verb == "off" {
		if ans.Pause == nil {
			fmt.Fprintf(e.stderr, "agentctl guard off: agentd recorded no pause for %s\n", name)
			return exitError
		}
		fmt.Fprintf(e.stdout, "guard of %s paused until %s; journal_mode changes and maintenance that must be the store's only holder can run now.\n",
			name, stamp(ans.Pause.Until))
		fmt.Fprintf(e.stdout, "It re-arms by itself then, or now with: agentctl guard on %s\n", guardTarget(*profile, *home, *db))
		if ans.Guard != nil && ans.Guard.State != control.GuardPaused {
			fmt.Fprintf(e.stdout, "Note: the guard is %s, so the pause changes nothing until it is armed.\n", state)
		}
		return exitOK
	}
	if !ans.Resumed {
		fmt.Fprintf(e.stdout, "guard of %s was not paused; it is %s\n", name, state)
		return exitOK
	}
	fmt.Fprintf(e.stdout, "guard of %s re-armed: %s\n", name, state)
	return exitOK
}

// guardTarget repeats the store's flags for the hint.
func guardTarget(profile, home, db string) string {
	if db != "" {
		return "--db " + db
	}
	s := "--profile " + profile
	if home != "" {
		s += " --home " + home
	}
	return s
}
