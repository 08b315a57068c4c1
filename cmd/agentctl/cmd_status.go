package main

// `agentctl status --json` prints control.Status, version 1.1. Fields
// are only ever added (each addition bumps "version_minor"); a change that
// breaks readers bumps "version". Minor 1 added "rule", "uninspected",
// "rule_note", the holders' "access", "inspected", "foreign_mount_ns",
// "ns_pid", the files' "host_path", "match", "evidence", "fd_write",
// "map_write", "access", and the blind entries' "scope".
//
//	{
//	  "version": 1, "version_minor": 1,
//	  "generated_at": "2026-11-30T00:08:55.95Z",       // RFC 3339, UTC
//	  "daemon": {
//	    "running": true,                               // agentd answered on its socket
//	    "pid": 812, "started_at": "...",               // only when running
//	    "state_dir": "/var/lib/stateguard",            // only when running
//	    "socket": "/run/stateguard/agent.sock",        // the socket used or tried
//	    "error": "daemon not running"                  // only when not running
//	  },
//	  "stores": [{
//	    "key": "/home/u/.hermes/state.db",             // stable id: the main file's path
//	    "profile": "default",                          // "" for a generic (non-Hermes) store
//	    "home": "/home/u/.hermes",
//	    "path": "/home/u/.hermes/state.db",
//	    "kind": "hermes",                              // hermes | generic
//	    "generation": {
//	      "main": {"exists": true, "dev": 64768, "ino": 131, "size": 4096, "nlink": 1},
//	      "wal":  {"exists": true, ...}, "shm": {"exists": false},
//	      "wal_salts": "1a2b3c4d:5e6f7a8b",            // salt-1:salt-2 in hex, when the WAL header is valid
//	      "checkpoint_seq": 3, "application_id": 0
//	    },
//	    "verdict": "held",                             // clear | held | unknown
//	    "rule": "locks",                               // the verdict rule that produced it: locks | strict
//	    "holders": [{
//	      "pid": 4242, "start_ticks": 159695, "start_time": "...",   // host pid
//	      "uid": 1000, "user": "u", "exe": "/usr/bin/python3",
//	      "cmdline": ["python3", "-m", "hermes"],
//	      "access": "write",                           // can write the generation: write | read | unknown
//	      "inspected": true,                           // false: known by lock evidence only
//	      "foreign_mount_ns": true,                    // optional: in another mount namespace
//	      "ns_pid": 1,                                 // optional: its pid in its own pid namespace
//	      "files": [{
//	        "role": "main",                            // main | wal | shm
//	        "path": "/data/state.db",                  // as the holder sees it ("" when lock evidence only)
//	        "host_path": "/home/u/.hermes/state.db",   // as the host sees it ("" when unknown)
//	        "fd": 5,                                   // -1 when only mmapped or locked
//	        "mapped": false,
//	        "id": {"dev": 64768, "ino": 131},
//	        "nlink": 1,
//	        "current": true,                           // false: an orphan inode
//	        "match": "inode",                          // inode | name | sqlite (a main renamed aside)
//	        "evidence": ["fd", "lock"],                // fd | map | lock
//	        "fd_write": true, "map_write": false,      // an fd open for writing; a rw-s mapping
//	        "access": "write"                          // write | read | unknown
//	      }]
//	    }],
//	    "blind": [{"pid": 1, "uid": 0, "reason": "read /proc/1/fd: permission denied", "scope": "own_user"}],
//	                                                   // processes that could open the store, could not be
//	                                                   // inspected and keep it from clear; pid 0 = not listable;
//	                                                   // scope: other_user | own_user | scan
//	    "uninspected": {"count": 68, "uids": [0], "pids": [1, 2], "summary": "68 processes of other users
//	                    not inspected; none holds a lock on this store"},  // cleared by the locks rule
//	    "rule_note": "...",                            // optional: why the locks rule could not clear them
//	    "orphans": 0,                                  // holders of an inode no longer at its path
//	    "guard": {"state": "armed", "until": "...", "reason": "..."},  // optional
//	    "incidents": [{"id": "...", "kind": "replaced", "state": "pinned", "policy": "hold",
//	                   "opened_at": "...", "capture": "...", "error": "..."}],  // open ones; daemon only
//	    "queued_replays": 0,                           // daemon only
//	    "error": "..."                                 // the generation could not be read
//	  }],
//	  "problems": [{"path": "...", "error": "...", "hint": "..."}],  // discovery problems
//	  "queue": {"queued": 0, "running": 0, "failed": 0, "done": 0}  // replay jobs; daemon only
//	}
//
// Exit codes: 0 when every store is clear or held only by current holders
// and no process the rule counts is uninspected; 3 when any store has an
// orphan holder, an unknown verdict, or "blind" entries; 1 on error.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/internal/termsafe"
	"github.com/stateguard/stateguard/service"
	"github.com/stateguard/stateguard/store"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// scope is which stores a verb looks at, where it finds agentd, and the
// config whose verdict rule a scan of its own uses.
type scope struct {
	homes    listFlag
	profiles listFlag
	socket   string
	config   string
}

func (sc *scope) register(fs *flag.FlagSet) {
	fs.Var(&sc.homes, "home", "only this Hermes home (repeatable); default: every discovered home")
	fs.Var(&sc.profiles, "profile", "only this profile (repeatable)")
	fs.StringVar(&sc.socket, "socket", "", "agentd control socket (default $"+socketEnv+", else the agent's default)")
	fs.StringVar(&sc.config, "config", "", "agentd config whose verdict rule a scan without agentd uses (default: the usual one)")
}

// scanRule is the verdict rule of the config at path (the default config
// when path is ""), as agentd would judge. An unreadable or invalid config
// gives the strict rule and the error, so a broken file never makes a
// scan more lenient than asked.
func scanRule(path string, getenv func(string) string) (holders.Rule, error) {
	explicit := path != ""
	if !explicit {
		path = service.DefaultConfigPath(getenv, os.Geteuid())
	}
	cfg, err := service.Load(path, explicit)
	if err != nil {
		return holders.RuleStrict, err
	}
	cfg.ApplyDefaults()
	return cfg.Verdict, nil
}

func statusUsage(w io.Writer, fs *flag.FlagSet) {
	printUsage(w, fs, fmt.Sprintf(`usage: agentctl status [--json] [--all] [--home DIR]... [--profile NAME]... [--socket PATH] [--config FILE]

Shows every store with its generation, the processes holding it and, when
agentd runs, its open incidents. Without agentd it scans the host itself,
judging processes it cannot inspect by the config's verdict rule (locks:
another user's process holding no lock on the store does not count).
With more than %d stores it prints a summary (counts by verdict, guard
state, open incidents, queued replays) and then only the stores that need
attention; --all prints every store. --json always has every store.
`, summaryAbove), `Exit codes: 0 every store clear or held only by current holders, 1 error,
2 usage, 3 an orphan holder, an unknown verdict or uninspected processes
that the rule counts.
`)
}

func runStatus(ctx context.Context, e *env, args []string) int {
	v := newVerb(e, "status", statusUsage)
	var sc scope
	sc.register(v.fs)
	asJSON := v.fs.Bool("json", false, "print the status as JSON (shape: version 1.1, see the README)")
	all := v.fs.Bool("all", false, fmt.Sprintf("print every store in full, even when there are more than %d (default: a summary, then only the stores needing attention)", summaryAbove))
	if _, code, ok := v.parseN(args, 0); !ok {
		return code
	}
	st, err := gatherStatus(ctx, e, &sc)
	if err != nil {
		return v.fail(err)
	}
	if err := missingProfiles(st, sc.profiles); err != nil {
		return v.fail(err)
	}
	addHermesDiverts(ctx, &st)
	if *asJSON {
		if code := v.printJSON(st); code != exitOK {
			return code
		}
	} else if len(st.Stores) > summaryAbove && !*all {
		printSummary(e.stdout, st)
	} else {
		printStatus(e.stdout, st)
	}
	return statusExit(st)
}

// missingProfiles fails a --profile that names no store (nor a problem)
// in scope: an
// empty table would read as "nothing to worry about" for a typo.
func missingProfiles(st control.Status, want []string) error {
	var missing []string
	for _, p := range want {
		// A profile discovery could not use (a symlinked state.db) is in
		// scope: its problem is the answer.
		if !slices.ContainsFunc(st.Stores, func(s control.StoreStatus) bool { return s.Profile == p }) &&
			!slices.ContainsFunc(st.Problems, func(q control.ProblemStatus) bool { return problemProfile(q.Path) == p }) {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("no store of profile %s found (hint: check the name; `agentctl status` without --profile lists every profile, and --home picks the home it lives in)",
		strings.Join(missing, ", "))
}

// statusExit maps a status to the exit code: refused (3) when any store
// has an orphan holder or when the scan cannot vouch for it (an unknown
// verdict, or processes it could not inspect, which might hold an orphan).
func statusExit(st control.Status) int {
	for _, s := range st.Stores {
		if !storeSafe(s) {
			return exitRefused
		}
	}
	return exitOK
}

func storeSafe(s control.StoreStatus) bool {
	if s.Orphans > 0 || len(s.Blind) > 0 {
		return false
	}
	for i := range s.Holders {
		if s.Holders[i].Orphan() {
			return false
		}
	}
	return s.Verdict == holders.VerdictClear || s.Verdict == holders.VerdictHeld
}

// gatherStatus asks agentd, and scans here when it does not answer.
func gatherStatus(ctx context.Context, e *env, sc *scope) (control.Status, error) {
	sock := socketPath(sc.socket, e.getenv)
	var st control.Status
	err := newClient(sock).get(ctx, "/v1/status", &st)
	if err == nil {
		filterDaemonStatus(&st, sc, e.getenv)
		return st, nil
	}
	var api *apiError
	if errors.As(err, &api) {
		// agentd answered and failed: its journal or its scan is broken,
		// which a scan here would hide.
		return st, err
	}
	st = standaloneStatus(sc, e.getenv)
	st.Daemon = control.DaemonStatus{Running: false, Socket: sock, Error: "daemon not running"}
	if !errors.Is(err, errDaemonNotRunning) {
		st.Daemon.Error = err.Error()
	}
	return st, nil
}

// standaloneStatus discovers the stores and scans every process itself,
// as the daemon would.
func standaloneStatus(sc *scope, getenv func(string) string) control.Status {
	stores, problems := discoverStores(sc, getenv)
	targets := make([]holders.Target, len(stores))
	for i, s := range stores {
		targets[i] = holders.Target{Path: s.Path, Dir: holders.DirRecord{ID: s.DirID.ID, UID: s.DirID.UID}}
	}
	rule, err := scanRule(sc.config, getenv)
	if err != nil {
		problems = append(problems, store.Problem{Path: "config", Err: err,
			Hint: "the scan judges by the strict verdict rule until the config is fixed"})
	}
	var scan *holders.Result
	if len(targets) > 0 {
		var err error
		// A failed scan leaves every verdict unknown, never clear.
		if scan, err = holders.ScanWith(targets, holders.Options{Rule: rule}); err != nil {
			problems = append(problems, store.Problem{Path: "/proc", Err: fmt.Errorf("holder scan: %w", err),
				Hint: "every verdict is unknown; run agentctl as root or start agentd"})
		}
	}
	return control.BuildStatus(stores, problems, scan)
}

// discoverStores finds the stores in scope: with --home, exactly those
// homes (each as if it were $HERMES_HOME, so neither the user's ~/.hermes
// nor the password database adds any); otherwise every home the agent
// itself would discover.
func discoverStores(sc *scope, getenv func(string) string) ([]store.Store, []store.Problem) {
	var stores []store.Store
	var problems []store.Problem
	if len(sc.homes) == 0 {
		stores, problems = store.Discover(store.DiscoverOptions{Getenv: getenv})
	} else {
		seen := map[string]bool{}
		for _, h := range sc.homes {
			ss, ps := store.Discover(onlyHome(h, getenv))
			for _, s := range ss {
				if !seen[s.Key()] {
					seen[s.Key()] = true
					stores = append(stores, s)
				}
			}
			problems = append(problems, homeProblems(ps, h)...)
		}
	}
	if len(sc.profiles) > 0 {
		stores = slices.DeleteFunc(stores, func(s store.Store) bool { return !slices.Contains(sc.profiles, s.Profile) })
		problems = slices.DeleteFunc(problems, func(p store.Problem) bool {
			prof := problemProfile(p.Path)
			return prof != "" && !slices.Contains(sc.profiles, prof)
		})
	}
	return stores, problems
}

// onlyHome are discovery options that find home h and nothing else.
func onlyHome(h string, getenv func(string) string) store.DiscoverOptions {
	h = expandHome(h, getenv)
	return store.DiscoverOptions{
		Getenv: func(k string) string {
			switch k {
			case "HERMES_HOME":
				return h
			case "HERMES_DATA_DIR_SUFFIX":
				return ""
			}
			return getenv(k)
		},
		CurrentUserOnly: true,
	}
}

// homeProblems rewrites the hint of a missing --home, which discovery
// words for $HERMES_HOME.
func homeProblems(ps []store.Problem, arg string) []store.Problem {
	for i := range ps {
		if errors.Is(ps[i].Err, store.ErrMissingHome) {
			ps[i].Hint = fmt.Sprintf("check --home %s", arg)
		}
	}
	return ps
}

// problemProfile is the profile a discovery problem's path belongs to, or
// "" for a problem of a whole home.
func problemProfile(path string) string {
	parts := strings.Split(filepath.ToSlash(path), "/")
	for i := len(parts) - 2; i >= 0; i-- {
		if parts[i] == "profiles" {
			return parts[i+1]
		}
	}
	if strings.HasPrefix(filepath.Base(path), "state.db") {
		return store.DefaultProfile
	}
	return ""
}

// filterDaemonStatus keeps the stores (and problems) in scope. A --home
// the daemon does not watch becomes a problem, so an empty table is never
// mistaken for "nothing holds that home's stores".
func filterDaemonStatus(st *control.Status, sc *scope, getenv func(string) string) {
	if len(sc.homes) > 0 {
		var roots []string
		var extra []control.ProblemStatus
		for _, h := range sc.homes {
			homes, ps := store.DiscoverHomes(onlyHome(h, getenv))
			for _, p := range homeProblems(ps, h) {
				extra = append(extra, control.ProblemStatus{Path: p.Path, Error: p.Err.Error(), Hint: p.Hint})
			}
			for _, hm := range homes {
				roots = append(roots, hm.Root)
				if !slices.ContainsFunc(st.Stores, func(s control.StoreStatus) bool { return s.Home == hm.Root }) {
					extra = append(extra, control.ProblemStatus{Path: hm.Root,
						Error: "home not watched by the running agentd",
						Hint:  "add it to the agent's config (homes) and reload it with SIGHUP"})
				}
			}
		}
		st.Stores = slices.DeleteFunc(st.Stores, func(s control.StoreStatus) bool { return !slices.Contains(roots, s.Home) })
		st.Problems = slices.DeleteFunc(st.Problems, func(p control.ProblemStatus) bool {
			return !slices.ContainsFunc(roots, func(r string) bool { return p.Path == r || strings.HasPrefix(p.Path, r+"/") })
		})
		st.Problems = append(st.Problems, extra...)
	}
	if len(sc.profiles) > 0 {
		st.Stores = slices.DeleteFunc(st.Stores, func(s control.StoreStatus) bool { return !slices.Contains(sc.profiles, s.Profile) })
		st.Problems = slices.DeleteFunc(st.Problems, func(p control.ProblemStatus) bool {
			prof := problemProfile(p.Path)
			return prof != "" && !slices.Contains(sc.profiles, prof)
		})
	}
	if st.Stores == nil {
		st.Stores = []control.StoreStatus{}
	}
	if st.Problems == nil {
		st.Problems = []control.ProblemStatus{}
	}
}

// writeJSON writes v as indented JSON with C1 controls \u-escaped
// (termsafe.JSON): still JSON, and harmless on a terminal.
func writeJSON(w io.Writer, v any) error { return termsafe.EncodeJSON(w, v) }
