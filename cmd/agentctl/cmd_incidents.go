package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/journal"
)

// daemonFlags are how the incident and queue verbs find agentd, and its
// journal when it does not run.
type daemonFlags struct {
	socket   string
	stateDir string
}

func (d *daemonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.socket, "socket", "", "agentd control socket (default $"+socketEnv+", else the agent's default)")
	fs.StringVar(&d.stateDir, "state-dir", "", "agentd's state directory, read when agentd does not run (default: the agent's default)")
}

// journalLabel heads what was read from the journal instead of agentd.
func journalLabel(j *journal.Journal) string {
	return fmt.Sprintf("from the journal %s, daemon not running", j.Path())
}

// openJournal opens agentd's journal read-only, for when agentd does not
// answer. Its error says both that the daemon is down and why the
// journal could not stand in.
func openJournal(ctx context.Context, d *daemonFlags, getenv func(string) string, down error) (*journal.Journal, error) {
	dir := d.stateDir
	if dir == "" {
		dir = control.DefaultStateDir(getenv, os.Geteuid())
	}
	if dir == "" {
		return nil, fmt.Errorf("%w; no state directory to read the journal from (pass --state-dir)", down)
	}
	j, err := journal.OpenReadOnly(ctx, filepath.Join(dir, journal.FileName))
	if errors.Is(err, journal.ErrMissing) {
		return nil, fmt.Errorf("%w; no journal in %s either (hint: start agentd, or pass its --state-dir)", down, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("%w; reading the journal instead: %v", down, err)
	}
	return j, nil
}

func incidentsUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: agentctl incidents [--all] [--json] [--socket PATH] [--state-dir DIR]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Lists agentd's unfinished incidents, or every incident with --all. When agentd")
	fmt.Fprintln(w, "does not run, reads its journal read-only and says so.")
	fmt.Fprintln(w)
	fs.PrintDefaults()
}

func runIncidents(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("incidents", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var df daemonFlags
	df.register(fs)
	all := fs.Bool("all", false, "every incident, resolved and failed ones too")
	asJSON := fs.Bool("json", false, "print the incidents as JSON (the control API's shape)")
	if _, code, ok := parseOrUsage(e, fs, args, 0, incidentsUsage); !ok {
		return code
	}
	path := "/v1/incidents"
	if *all {
		path += "?all=1"
	}
	var incs []journal.Incident
	err := newClient(socketPath(df.socket, e.getenv)).get(ctx, path, &incs)
	var from *journal.Journal
	if errors.Is(err, errDaemonNotRunning) {
		if from, err = openJournal(ctx, &df, e.getenv, err); err == nil {
			defer from.Close()
			incs, err = from.ListIncidents(ctx, journal.ListOptions{OpenOnly: !*all})
		}
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "agentctl incidents: %v\n", err)
		return exitError
	}
	if incs == nil {
		incs = []journal.Incident{}
	}
	if *asJSON {
		if from != nil {
			fmt.Fprintf(e.stderr, "agentctl incidents: %s\n", journalLabel(from))
		}
		if err := writeJSON(e.stdout, incs); err != nil {
			fmt.Fprintf(e.stderr, "agentctl incidents: %v\n", err)
			return exitError
		}
		return exitOK
	}
	if from != nil {
		fmt.Fprintf(e.stdout, "(%s)\n", journalLabel(from))
	}
	if len(incs) == 0 {
		if *all {
			fmt.Fprintln(e.stdout, "No incidents.")
		} else {
			fmt.Fprintln(e.stdout, "No open incidents.")
		}
		return exitOK
	}
	t := newTable("", "ID", "KIND", "STATE", "POLICY", "PROFILE", "OPENED", "STORE")
	for _, in := range incs {
		prof := in.Profile
		if prof == "" {
			prof = "-"
		}
		t.row(in.ID, string(in.Kind), string(in.State), in.Policy, prof, stamp(in.OpenedAt), in.Store)
	}
	t.write(e.stdout)
	return exitOK
}

// parseOrUsage parses flags anywhere among args and wants exactly npos
// positional arguments, which it returns. On -h it prints the usage and
// returns (nil, 0, false); on a mistake it prints the error and the usage
// and returns (nil, 2, false).
func parseOrUsage(e *env, fs *flag.FlagSet, args []string, npos int, usage func(io.Writer, *flag.FlagSet)) ([]string, int, bool) {
	pos, err := flagsAnywhere(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		usage(e.stdout, fs)
		return nil, exitOK, false
	}
	if err == nil && len(pos) != npos {
		if len(pos) > npos {
			err = fmt.Errorf("unexpected argument %q", pos[npos])
		} else {
			err = errors.New("missing argument")
		}
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "agentctl %s: %v\n\n", fs.Name(), err)
		usage(e.stderr, fs)
		return nil, exitUsage, false
	}
	return pos, 0, true
}

// flagsAnywhere parses flags before, between and after positional
// arguments ("release ID --kill" as the usage shows it) and returns the
// positional ones; "--" ends the flags.
func flagsAnywhere(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// Parse consumes a "--" terminator: what follows is positional.
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
