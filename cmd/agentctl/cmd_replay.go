package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

func init() {
	register(command{
		name:    "replay",
		summary: "replay a diverted JSONL into its store, exactly once",
		run:     runReplay,
	})
}

// replayRequest is what a running agentd would be asked to queue.
type replayRequest struct {
	Path      string // absolute JSONL path
	SessionID string // "" for the file's stem
	Store     string // absolute state.db path
}

// queueReplay asks a running agentd to queue the job and reports whether
// it did.
//
// DAEMON HOOK: the control-socket client belongs to the daemon's owner.
// Until it is wired here (returning queued=false when no daemon answers),
// this is nil and every replay runs in this process, as with --now.
var queueReplay func(ctx context.Context, req replayRequest) (queued bool, err error)

func replayUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: agentctl replay PATH [--session-id ID] [--inspect-only] [--now]")
	fmt.Fprintln(w, "                        [--profile P] [--home H] | [--db PATH]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Appends the records of a diverted JSONL (Hermes' or stateguard's) that the")
	fmt.Fprintln(w, "session does not have yet, with Hermes' recovery ids, in one transaction.")
	fmt.Fprintln(w, "The store is --db, else profile P (default \"default\") of home H (default")
	fmt.Fprintln(w, "$HERMES_HOME or ~/.hermes). --inspect-only writes nothing, and reads a store")
	fmt.Fprintln(w, "(read-only) only when one is named with --db, --profile or --home.")
	fmt.Fprintln(w)
	fs.PrintDefaults()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Exit codes: 0 ok, 1 error, 2 usage, 4 some lines skipped or repaired (listed).")
}

func runReplay(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sessionID := fs.String("session-id", "", "session to replay into (default: the file name's stem)")
	inspect := fs.Bool("inspect-only", false, "report what a replay would do; write nothing")
	now := fs.Bool("now", false, "run here and now instead of queueing with a running agentd")
	profile := fs.String("profile", "", "Hermes profile whose store to use (default \"default\")")
	home := fs.String("home", "", "Hermes home (default $HERMES_HOME, else ~/.hermes)")
	db := fs.String("db", "", "path of the store (state.db) to replay into")
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		replayUsage(e.stdout, fs)
		return exitOK
	}
	if err != nil || len(pos) != 1 || (*db != "" && (*profile != "" || *home != "")) {
		switch {
		case err != nil:
			fmt.Fprintf(e.stderr, "agentctl replay: %v\n\n", err)
		case len(pos) != 1:
			fmt.Fprintf(e.stderr, "agentctl replay: need exactly one JSONL path, got %d\n\n", len(pos))
		default:
			fmt.Fprintln(e.stderr, "agentctl replay: --db names the store; do not combine it with --profile/--home")
			fmt.Fprintln(e.stderr)
		}
		replayUsage(e.stderr, fs)
		return exitUsage
	}
	jsonl := expandHome(pos[0], e.getenv)
	named := *db != "" || *profile != "" || *home != ""

	if *inspect {
		dbPath := ""
		if named {
			if dbPath, err = replayStore(e, *db, *profile, *home); err != nil {
				fmt.Fprintf(e.stderr, "agentctl replay: %v\n", err)
				return exitError
			}
		}
		rep, err := recovery.Inspect(ctx, jsonl, dbPath, recovery.ReplayOptions{SessionID: *sessionID})
		if err != nil {
			fmt.Fprintf(e.stderr, "agentctl replay: %v\n", err)
			return exitError
		}
		printInspect(e.stdout, rep)
		return reportLines(e.stderr, rep.Issues, rep.Repaired, "would be")
	}

	dbPath, err := replayStore(e, *db, *profile, *home)
	if err != nil {
		fmt.Fprintf(e.stderr, "agentctl replay: %v\n", err)
		return exitError
	}
	if !*now && queueReplay != nil {
		abs, _ := filepath.Abs(jsonl)
		queued, err := queueReplay(ctx, replayRequest{Path: abs, SessionID: *sessionID, Store: dbPath})
		if err != nil {
			fmt.Fprintf(e.stderr, "agentctl replay: queue with agentd: %v\n", err)
			return exitError
		}
		if queued {
			fmt.Fprintf(e.stdout, "queued replay of %s into %s (see agentctl queue)\n", abs, dbPath)
			return exitOK
		}
	}
	rep, err := recovery.ReplayFile(ctx, dbPath, jsonl, recovery.ReplayOptions{SessionID: *sessionID})
	if err != nil {
		fmt.Fprintf(e.stderr, "agentctl replay: %v\n", err)
		if errors.Is(err, store.ErrNeedsTokenizer) || errors.Is(err, store.ErrNotWALStore) || errors.Is(err, store.ErrNotRegular) {
			fmt.Fprintln(e.stderr, "agentctl replay: the store was not written; the JSONL is unchanged")
		}
		return exitError
	}
	fmt.Fprintf(e.stdout, "replayed %s into session %s of %s\n", rep.Path, rep.SessionID, dbPath)
	created := ""
	if rep.SessionCreated {
		created = " (session created)"
	}
	fmt.Fprintf(e.stdout, "  lines %d, records %d: %d already present, %d appended%s\n",
		rep.Lines, rep.Records, rep.AlreadyPresent, rep.Appended, created)
	return reportLines(e.stderr, rep.Issues, rep.Repaired, "were")
}

func printInspect(w io.Writer, rep recovery.InspectReport) {
	fmt.Fprintf(w, "Diverted transcript: %s\n", rep.Path)
	fmt.Fprintf(w, "Session: %s\n", rep.SessionID)
	fmt.Fprintf(w, "Lines: %d\n", rep.Lines)
	fmt.Fprintf(w, "Valid records: %d\n", rep.Records)
	switch {
	case rep.WouldAppend >= 0:
		note := ""
		if rep.StoreNote != "" {
			note = "; " + rep.StoreNote
		}
		fmt.Fprintf(w, "Would append: %d (%d already present in %s%s)\n", rep.WouldAppend, rep.AlreadyPresent, rep.Store, note)
	case rep.Store == "":
		fmt.Fprintln(w, "Would append: unknown (no database opened; name the store with --db or --profile to count)")
	default:
		fmt.Fprintf(w, "Would append: unknown (%s: %s)\n", rep.Store, rep.StoreNote)
	}
}

// reportLines names every skipped and repaired line on w and returns the
// exit code: partial when there is any.
func reportLines(w io.Writer, issues []recovery.LineIssue, repaired []int, verb string) int {
	invalid := 0
	for _, l := range issues {
		what := "dropped"
		if l.Invalid {
			what = "skipped"
			invalid++
		}
		fmt.Fprintf(w, "%s line %d: %s\n", what, l.Line, l.Reason)
	}
	for _, n := range repaired {
		fmt.Fprintf(w, "repaired line %d: invalid UTF-8 replaced by U+FFFD, as Hermes reads it\n", n)
	}
	if len(issues) == 0 && len(repaired) == 0 {
		return exitOK
	}
	fmt.Fprintf(w, "partial: %d lines %s skipped (%d invalid), %d repaired\n", len(issues), verb, invalid, len(repaired))
	return exitPartial
}

// replayStore resolves the store to use: --db, else the profile's
// state.db in the home, by Hermes' rules.
func replayStore(e *env, db, profile, home string) (string, error) {
	if db != "" {
		return filepath.Abs(expandHome(db, e.getenv))
	}
	if profile == "" {
		profile = store.DefaultProfile
	}
	var h store.Home
	if home != "" {
		root, err := filepath.Abs(expandHome(home, e.getenv))
		if err != nil {
			return "", err
		}
		h = store.Home{Root: root}
	} else {
		homes, problems := store.DiscoverHomes(store.DiscoverOptions{Getenv: e.getenv, CurrentUserOnly: true})
		if len(homes) == 0 {
			if len(problems) > 0 {
				return "", fmt.Errorf("no Hermes home: %v", problems[0])
			}
			return "", errors.New("no Hermes home found; pass --home or --db")
		}
		h = homes[0]
	}
	stores, problems := store.Profiles(h)
	for _, s := range stores {
		if s.Profile == profile {
			return s.Path, nil
		}
	}
	want := filepath.Join(h.Root, "state.db")
	if profile != store.DefaultProfile {
		want = filepath.Join(h.Root, "profiles", profile, "state.db")
	}
	for _, p := range problems {
		if p.Path == want || p.Path == filepath.Dir(want) {
			return "", p
		}
	}
	return "", fmt.Errorf("no profile %q in home %s (profiles live in %s)", profile, h.Root,
		filepath.Join(h.Root, "profiles"))
}

// expandHome expands a leading ~/ as Hermes' Path.expanduser() does.
func expandHome(p string, getenv func(string) string) string {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p
	}
	home := getenv("HOME")
	if home == "" {
		if h, err := os.UserHomeDir(); err == nil {
			home = h
		}
	}
	if home == "" {
		return p
	}
	return filepath.Join(home, strings.TrimPrefix(p, "~"))
}

// parseInterspersed parses flags anywhere among the arguments, so
// "replay PATH --session-id X" works as the usage shows.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
