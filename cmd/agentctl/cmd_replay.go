package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// replayRequest is what a running agentd would be asked to queue.
type replayRequest struct {
	Path      string // absolute JSONL path
	SessionID string // "" for the file's stem
	Store     string // absolute state.db path
}

func replayUsage(w io.Writer, fs *flag.FlagSet) {
	printUsage(w, fs, `usage: agentctl replay PATH [--session-id ID] [--inspect-only] [--now]
                        [--profile P] [--home H] | [--db PATH]
       agentctl replay --capture DIR [--include-pre-replacement] [--kind K]
                        [--replaced-at TIME] [--now] [--profile P] [--home H] | [--db PATH]

Appends the records of a diverted JSONL (Hermes' or stateguard's) that the
session does not have yet, with Hermes' recovery ids, in one transaction.
The store is --db, else profile P (default "default") of home H (default
$HERMES_HOME or ~/.hermes). --inspect-only writes nothing, and reads a store
(read-only) only when one is named with --db, --profile or --home.

With --capture, the rows a capture (stateguard's or Hermes') holds and the store
lacks are first diverted to <profile home>/sessions/recovered/<incident>/, then
replayed. Rows a restore rolled back (kind replaced, stamped at or before
--replaced-at) go to pre-replacement/ and are replayed only with
--include-pre-replacement.
`, `Exit codes: 0 ok, 1 error, 2 usage, 3 refused (unsafe directory),
4 some lines or rows skipped or repaired (listed).
`)
}

func runReplay(ctx context.Context, e *env, args []string) int {
	v := newVerb(e, "replay", replayUsage)
	sessionID := v.fs.String("session-id", "", "session to replay into (default: the file name's stem)")
	inspect := v.fs.Bool("inspect-only", false, "report what a replay would do; write nothing")
	now := v.fs.Bool("now", false, "run here and now instead of queueing with a running agentd")
	var sf storeFlags
	sf.register(v.fs, "Hermes profile whose store to use (default \"default\")", "path of the store (state.db) to replay into")
	var cf captureFlags
	cf.register(v.fs)
	pos, code, ok := v.parse(args, func(pos []string) string {
		if cf.dir != "" || cf.includePre || cf.kind != "" || cf.replacedAt != "" {
			if msg := cf.check(pos, *sessionID, *inspect); msg != "" {
				return msg
			}
		} else if len(pos) != 1 {
			return fmt.Sprintf("need exactly one JSONL path, got %d", len(pos))
		}
		return sf.mixed()
	})
	if !ok {
		return code
	}
	if cf.dir != "" {
		return runReplayCapture(ctx, v, &cf, &sf, *now)
	}
	jsonl := expandHome(pos[0], e.getenv)

	if *inspect {
		dbPath := ""
		if sf.named() {
			var err error
			if dbPath, err = sf.resolve(e); err != nil {
				return v.fail(err)
			}
		}
		rep, err := recovery.Inspect(ctx, jsonl, dbPath, recovery.ReplayOptions{SessionID: *sessionID})
		if err != nil {
			return v.fail(err)
		}
		printInspect(e.stdout, rep)
		return reportLines(e.stderr, rep.Issues, rep.Repaired, "would be")
	}

	st, err := sf.resolveStore(e)
	if err != nil {
		return v.fail(err)
	}
	dbPath := st.Path
	if !*now && e.queueReplay != nil {
		abs, _ := filepath.Abs(jsonl)
		queued, err := e.queueReplay(ctx, e, replayRequest{Path: abs, SessionID: *sessionID, Store: dbPath})
		if err != nil {
			return v.fail(fmt.Errorf("queue with agentd: %w", err))
		}
		if queued {
			fmt.Fprintf(e.stdout, "queued replay of %s into %s (see agentctl queue)\n", abs, dbPath)
			return exitOK
		}
	}
	rep, err := recovery.ReplayFile(ctx, dbPath, jsonl, recovery.ReplayOptions{SessionID: *sessionID, StoreDir: st.DirID})
	uncheckpointed := errors.Is(err, store.ErrCheckpointIncomplete)
	if err != nil && !uncheckpointed {
		v.fail(err)
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
	code = reportLines(e.stderr, rep.Issues, rep.Repaired, "were")
	if uncheckpointed {
		// The rows are in; only the checkpoint is missing: said after the
		// report, and the exit is an error so a script runs it again.
		return v.fail(err)
	}
	return code
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
	s, err := resolveStoreOf(e, db, profile, home)
	return s.Path, err
}

// resolveStoreOf is replayStore with the store directory as it is now (DirID):
// an operator's path is resolved once, here, and every later open of the
// store goes through a handle on that directory (store.Store.OpenWritable).
func resolveStoreOf(e *env, db, profile, home string) (store.Store, error) {
	if db != "" {
		return store.ResolveStore(expandHome(db, e.getenv))
	}
	if profile == "" {
		profile = store.DefaultProfile
	}
	var h store.Home
	if home != "" {
		root, err := filepath.Abs(expandHome(home, e.getenv))
		if err != nil {
			return store.Store{}, err
		}
		if r, err := filepath.EvalSymlinks(root); err == nil {
			root = r // resolved once: the store's directory is then reached without links
		}
		h = store.Home{Root: root}
	} else {
		homes, problems := store.DiscoverHomes(store.DiscoverOptions{Getenv: e.getenv, CurrentUserOnly: true})
		if len(homes) == 0 {
			if len(problems) > 0 {
				return store.Store{}, fmt.Errorf("no Hermes home: %v", problems[0])
			}
			return store.Store{}, errors.New("no Hermes home found; pass --home or --db")
		}
		h = homes[0]
	}
	stores, problems := store.Profiles(h)
	for _, s := range stores {
		if s.Profile == profile {
			return s, nil
		}
	}
	want := filepath.Join(h.Root, "state.db")
	if profile != store.DefaultProfile {
		want = filepath.Join(h.Root, "profiles", profile, "state.db")
	}
	for _, p := range problems {
		if p.Path == want || p.Path == filepath.Dir(want) {
			return store.Store{}, p
		}
	}
	return store.Store{}, fmt.Errorf("no profile %q in home %s (hint: a profile's store is %s; `agentctl status --home %s` lists the profiles)",
		profile, h.Root, filepath.Join(h.Root, "profiles", "<name>", "state.db"), h.Root)
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

// captureFlags are replay's --capture mode: divert a capture, then replay
// what it diverted.
type captureFlags struct {
	dir        string
	includePre bool
	kind       string
	replacedAt string
}

func (c *captureFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.dir, "capture", "", "divert this capture directory first, then replay what it holds that the store lacks")
	fs.BoolVar(&c.includePre, "include-pre-replacement", false, "with --capture: also replay the rows a restore rolled back")
	fs.StringVar(&c.kind, "kind", "", "with --capture: incident kind replaced, sidecar_lost or mispaired (default: the capture's, else sidecar_lost)")
	fs.StringVar(&c.replacedAt, "replaced-at", "", "with --capture and kind replaced: when the store was replaced (RFC 3339 or Unix seconds)")
}

// check returns a usage problem, or "".
func (c *captureFlags) check(pos []string, sessionID string, inspect bool) string {
	switch {
	case c.dir == "":
		return "--include-pre-replacement, --kind and --replaced-at need --capture"
	case len(pos) != 0:
		return "--capture replaces the JSONL path; give one or the other"
	case sessionID != "":
		return "--capture replays each session into itself; --session-id does not apply"
	case inspect:
		return "--inspect-only does not combine with --capture (the divert writes files)"
	}
	return ""
}

// parseReplacedAt reads RFC 3339 or Unix seconds (fractions allowed).
func parseReplacedAt(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
		return time.Time{}, fmt.Errorf("--replaced-at %q: want RFC 3339 (2026-10-01T07:24:48Z) or Unix seconds", s)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), nil
}

// runReplayCapture diverts an operator's capture into the profile's
// sessions/recovered/<incident>/ and replays the files it wrote. The
// incident id is the capture's own (stateguard.incident_id), so a capture
// the daemon already diverted is found again rather than diverted twice,
// else manual-<capture directory name>.
func runReplayCapture(ctx context.Context, v *verb, cf *captureFlags, sf *storeFlags, now bool) int {
	e := v.e
	st, err := sf.resolveStore(e)
	if err != nil {
		return v.fail(err)
	}
	dbPath := st.Path
	capDir, err := filepath.Abs(expandHome(cf.dir, e.getenv))
	if err != nil {
		return v.fail(err)
	}
	info, err := recovery.OpenCapture(capDir)
	if err != nil {
		return v.fail(err)
	}
	req := recovery.DivertRequest{Capture: capDir, Store: dbPath, Kind: cf.kind,
		IncidentID: "manual-" + filepath.Base(capDir)}
	if sg := info.Manifest.Stateguard; sg != nil {
		if sg.IncidentID != "" {
			req.IncidentID = sg.IncidentID
		}
		if req.Kind == "" {
			req.Kind = sg.Kind
		}
	}
	if req.Kind == "" {
		// Hermes captures a generation whose WAL was lost under it.
		req.Kind = recovery.KindSidecarLost
	}
	if cf.replacedAt != "" {
		if req.ReplacedAt, err = parseReplacedAt(cf.replacedAt); err != nil {
			v.fail(err)
			return exitUsage
		}
	}
	if (req.Kind == recovery.KindReplaced || req.Kind == recovery.KindMispaired || req.Kind == recovery.KindRewritten) && req.ReplacedAt.IsZero() {
		fmt.Fprintf(e.stderr, "agentctl replay: the capture is of a %s store: give --replaced-at (when the restore replaced it),\n", req.Kind)
		fmt.Fprintln(e.stderr, "so the rows the restore rolled back on purpose are kept apart; or --kind sidecar_lost to take every missing row")
		return exitUsage
	}

	rep, err := recovery.Divert(ctx, req)
	if err != nil {
		v.fail(err)
		if errors.Is(err, recovery.ErrUnsafeDir) {
			return exitRefused
		}
		return exitError
	}
	state := "diverted"
	if rep.Existing {
		state = "already diverted"
	}
	fmt.Fprintf(e.stdout, "%s %s (%s, incident %s) into %s\n", state, capDir, rep.Kind, rep.IncidentID, rep.Dir)
	fmt.Fprintf(e.stdout, "  capture rows %d, store rows %d in %d sessions: %d to replay, %d rolled back by the restore\n",
		rep.CaptureRows, rep.HealthyRows, rep.Sessions, rep.ReplayRows, rep.PreReplacementRows)
	code := exitOK
	if rep.Unreplayable > 0 {
		fmt.Fprintf(e.stderr, "skipped %d rows with no content and no tool call (a replay drops them, as Hermes does)\n", rep.Unreplayable)
		code = exitPartial
	}
	for _, f := range rep.Files {
		if f.PreReplacement && !cf.includePre {
			fmt.Fprintf(e.stdout, "  not replayed: %s (%d rows the restore rolled back; --include-pre-replacement replays them)\n", f.Path, f.Rows)
		}
	}

	files := rep.ReplayFiles(cf.includePre)
	if !now && e.queueReplay != nil && len(files) > 0 {
		queued := 0
		for _, f := range files {
			ok, err := e.queueReplay(ctx, e, replayRequest{Path: f.Path, SessionID: f.SessionID, Store: dbPath})
			if err != nil {
				return v.fail(fmt.Errorf("queue with agentd: %w", err))
			}
			if !ok {
				break
			}
			queued++
		}
		if queued == len(files) {
			fmt.Fprintf(e.stdout, "queued %d replays into %s (see agentctl queue)\n", queued, dbPath)
			return code
		}
		files = files[queued:]
	}
	for _, f := range files {
		opts := f.ReplayOptions()
		opts.StoreDir = st.DirID
		r, err := recovery.ReplayFile(ctx, dbPath, f.Path, opts)
		if err != nil && !errors.Is(err, store.ErrCheckpointIncomplete) {
			return v.fail(err)
		}
		created := ""
		if r.SessionCreated {
			created = " (session created)"
		}
		fmt.Fprintf(e.stdout, "  replayed %s into session %s: %d already present, %d appended%s\n",
			f.Path, r.SessionID, r.AlreadyPresent, r.Appended, created)
		if c := reportLines(e.stderr, r.Issues, r.Repaired, "were"); c != exitOK {
			code = c
		}
		if err != nil {
			code = v.fail(err) // committed, not checkpointed: the next file may still go in
		}
	}
	return code
}
