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
func journalLabel(path string) string {
	return fmt.Sprintf("from the journal %s, daemon not running", path)
}

// openJournal opens agentd's journal read-only, for when agentd does not
// answer. Its error says both that the daemon is down and why the
// journal could not stand in.
func openJournal(ctx context.Context, d *daemonFlags, getenv func(string) string, down error) (*journal.Journal, error) {
	dir := d.stateDir
	if dir == "" && (d.socket != "" || getenv(socketEnv) != "") {
		// The socket names one agent; the default journal may be another
		// agent's, and reading it would answer for the wrong one.
		return nil, fmt.Errorf("%w; not reading the default journal for an agent chosen by its socket (hint: start that agentd, or pass its --state-dir too)", down)
	}
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

// askOrJournal GETs path from agentd into x. When agentd does not run,
// read fills x from its journal instead, whose path askOrJournal returns
// so that the answer can say where it came from ("": from agentd).
func askOrJournal(ctx context.Context, e *env, d *daemonFlags, path string, x any, read func(*journal.Journal) error) (string, error) {
	err := newClient(socketPath(d.socket, e.getenv)).get(ctx, path, x)
	if !errors.Is(err, errDaemonNotRunning) {
		return "", err
	}
	j, err := openJournal(ctx, d, e.getenv, err)
	if err != nil {
		return "", err
	}
	defer j.Close()
	return j.Path(), read(j)
}

// answer prints x as JSON, or as text, saying (on stderr with JSON) when
// it was read from the journal at from rather than from agentd.
func (v *verb) answer(from string, asJSON bool, x any, text func(io.Writer)) int {
	if asJSON {
		if from != "" {
			fmt.Fprintf(v.e.stderr, "agentctl %s: %s\n", v.fs.Name(), journalLabel(from))
		}
		return v.printJSON(x)
	}
	if from != "" {
		fmt.Fprintf(v.e.stdout, "(%s)\n", journalLabel(from))
	}
	text(v.e.stdout)
	return exitOK
}

func incidentsUsage(w io.Writer, fs *flag.FlagSet) {
	printUsage(w, fs, `usage: agentctl incidents [--all] [--json] [--socket PATH] [--state-dir DIR]

Lists agentd's unfinished incidents, or every incident with --all. When agentd
does not run, reads its journal read-only and says so.
`, "")
}

func runIncidents(ctx context.Context, e *env, args []string) int {
	v := newVerb(e, "incidents", incidentsUsage)
	var df daemonFlags
	df.register(v.fs)
	all := v.fs.Bool("all", false, "every incident, resolved and failed ones too")
	asJSON := v.fs.Bool("json", false, "print the incidents as JSON (the control API's shape)")
	if _, code, ok := v.parseN(args, 0); !ok {
		return code
	}
	path := "/v1/incidents"
	if *all {
		path += "?all=1"
	}
	var incs []journal.Incident
	from, err := askOrJournal(ctx, e, &df, path, &incs, func(j *journal.Journal) (err error) {
		incs, err = j.ListIncidents(ctx, journal.ListOptions{OpenOnly: !*all})
		return err
	})
	if err != nil {
		return v.fail(err)
	}
	if incs == nil {
		incs = []journal.Incident{}
	}
	return v.answer(from, *asJSON, incs, func(w io.Writer) {
		printIncidents(w, incs, *all)
	})
}

func printIncidents(w io.Writer, incs []journal.Incident, all bool) {
	if len(incs) == 0 {
		if all {
			fmt.Fprintln(w, "No incidents.")
		} else {
			fmt.Fprintln(w, "No open incidents.")
		}
		return
	}
	t := newTable("", "ID", "KIND", "STATE", "POLICY", "PROFILE", "OPENED", "STORE")
	for _, in := range incs {
		t.row(in.ID, string(in.Kind), string(in.State), in.Policy, orDash(in.Profile), stamp(in.OpenedAt), in.Store)
	}
	t.write(w)
}
