package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/holders"
)

// holdersJSON is `agentctl holders --json`, version 1.1 (fields are only
// added; minor 1 added access, inspected, the files with their evidence
// and both paths, and per store the rule and the uninspected summary):
//
//	{"version": 1, "version_minor": 1,
//	 "holders": [{"store": "/h/state.db", "profile": "default", "home": "/h",
//	              "pid": 4242, "start_ticks": 159695, "uid": 1000, "user": "u",
//	              "roles": ["main", "wal", "shm"], "orphan": false,
//	              "orphan_roles": [], "exe": "/usr/bin/python3", "cmdline": ["python3", "..."],
//	              "access": "write",             // write | read | unknown (lock evidence only)
//	              "inspected": true,             // false: known from /proc/locks only
//	              "foreign_mount_ns": false, "ns_pid": 0,
//	              "files": [{"role": "main", "current": true, "fd": 5, "mapped": false,
//	                         "path": "/data/state.db",       // as the holder sees it
//	                         "host_path": "/h/state.db",     // as the host sees it
//	                         "evidence": ["fd", "lock"],     // fd | map | lock
//	                         "match": "inode",               // inode | name | sqlite
//	                         "access": "write", "id": {"dev": 2049, "ino": 131}}]}],
//	 "stores": [{"store": "/h/state.db", "profile": "default", "verdict": "held",
//	             "rule": "locks",                  // locks | strict: what produced the verdict
//	             "blind": [{"pid": 1, "uid": 0, "reason": "...", "scope": "own_user"}],
//	             "uninspected": {"count": 3, "uids": [0], "pids": [1, 2, 3], "summary": "..."},
//	             "rule_note": "..."}],               // optional
//	 "daemon": {"running": false, ...}}      // as in agentctl status --json
type holdersJSON struct {
	Version      int                  `json:"version"`
	VersionMinor int                  `json:"version_minor"`
	Holders      []holderLine         `json:"holders"`
	Stores       []holdersStore       `json:"stores"`
	Daemon       control.DaemonStatus `json:"daemon"`
}

type holderLine struct {
	Store       string   `json:"store"`
	Profile     string   `json:"profile"`
	Home        string   `json:"home"`
	Pid         int      `json:"pid"`
	StartTicks  uint64   `json:"start_ticks"`
	UID         int      `json:"uid"`
	User        string   `json:"user"`
	Roles       []string `json:"roles"`
	Orphan      bool     `json:"orphan"`
	OrphanRoles []string `json:"orphan_roles"`
	Exe         string   `json:"exe"`
	Cmdline     []string `json:"cmdline"`

	Access         holders.Access `json:"access"`
	Inspected      bool           `json:"inspected"`
	ForeignMountNS bool           `json:"foreign_mount_ns"`
	NSPid          int            `json:"ns_pid"`
	Files          []holders.Held `json:"files"`
}

type holdersStore struct {
	Store       string              `json:"store"`
	Profile     string              `json:"profile"`
	Verdict     holders.Verdict     `json:"verdict"`
	Rule        holders.Rule        `json:"rule"`
	Blind       []holders.Blind     `json:"blind"`
	Uninspected holders.Uninspected `json:"uninspected"`
	RuleNote    string              `json:"rule_note,omitempty"`
}

func holdersUsage(w io.Writer, fs *flag.FlagSet) {
	printUsage(w, fs, `usage: agentctl holders [--json] [--files] [--home DIR]... [--profile NAME]... [--socket PATH] [--config FILE]

Prints one line per (store, holding process):
  profile pid user roles current|orphan command
roles is comma-separated (main,wal,shm); a store outside any profile shows "-".
With --files, each is followed by one indented line per file it holds:
    role current|orphan fd=N|- access=write|read|unknown evidence=fd,map,lock host=PATH holder=PATH
Processes the scan could not inspect are listed on stderr, with the verdict
rule's summary of those it cleared.
`, `Exit codes as agentctl status: 0 ok, 1 error, 2 usage, 3 orphan or unknown.
`)
}

func runHolders(ctx context.Context, e *env, args []string) int {
	v := newVerb(e, "holders", holdersUsage)
	var sc scope
	sc.register(v.fs)
	asJSON := v.fs.Bool("json", false, "print JSON instead of lines")
	withFiles := v.fs.Bool("files", false, "after each holder, one line per file it holds: access, evidence, host and holder paths")
	if _, code, ok := v.parseN(args, 0); !ok {
		return code
	}
	st, err := gatherStatus(ctx, e, &sc)
	if err != nil {
		return v.fail(err)
	}
	out := holdersOf(st)
	if *asJSON {
		if code := v.printJSON(out); code != exitOK {
			return code
		}
		return statusExit(st)
	}
	for _, h := range out.Holders {
		state := "current"
		if h.Orphan {
			state = "orphan"
		}
		cmd := strings.Join(h.Cmdline, " ")
		if cmd == "" {
			cmd = h.Exe
		}
		fmt.Fprintln(e.stdout, cleanCell(fmt.Sprintf("%s %d %s %s %s %s", orDash(h.Profile), h.Pid, h.User, strings.Join(h.Roles, ","), state, cmd)))
		if *withFiles {
			for _, f := range h.Files {
				fmt.Fprintln(e.stdout, cleanCell("    "+fileLine(f)))
			}
		}
	}
	for _, s := range out.Stores {
		for _, b := range s.Blind {
			fmt.Fprintln(e.stderr, cleanCell(fmt.Sprintf("agentctl holders: %s: pid %d (uid %d) not inspected: %s", s.Store, b.Pid, b.UID, b.Reason)))
		}
		if s.Uninspected.Count > 0 {
			fmt.Fprintln(e.stderr, cleanCell(fmt.Sprintf("agentctl holders: %s: %s (rule %s)", s.Store, s.Uninspected.Summary, s.Rule)))
		}
	}
	return statusExit(st)
}

// fileLine is one held file for `holders --files`.
func fileLine(f holders.Held) string {
	state, fd := "current", "-"
	if !f.Current {
		state = "orphan"
	}
	if f.FD >= 0 {
		fd = fmt.Sprint(f.FD)
	}
	host, holder := f.HostPath, f.Path
	if host == "" {
		host = "?"
	}
	if holder == "" {
		holder = "?"
	}
	return fmt.Sprintf("%s %s fd=%s access=%s evidence=%s host=%s holder=%s", f.Role, state, fd, f.Access, evidenceOf(f), host, holder)
}

func holdersOf(st control.Status) holdersJSON {
	out := holdersJSON{Version: 1, VersionMinor: control.StatusVersionMinor, Holders: []holderLine{}, Stores: []holdersStore{}, Daemon: st.Daemon}
	for _, s := range st.Stores {
		blind := s.Blind
		if blind == nil {
			blind = []holders.Blind{}
		}
		out.Stores = append(out.Stores, holdersStore{Store: s.Key, Profile: s.Profile, Verdict: s.Verdict, Rule: s.Rule,
			Blind: blind, Uninspected: s.Uninspected, RuleNote: s.RuleNote})
		for i := range s.Holders {
			p := &s.Holders[i]
			l := holderLine{Store: s.Key, Profile: s.Profile, Home: s.Home, Pid: p.Pid, StartTicks: p.StartTicks,
				UID: p.UID, User: userOf(p), Roles: rolesOf(p), OrphanRoles: []string{}, Exe: p.Exe, Cmdline: p.Cmdline,
				Access: p.Access, Inspected: p.Inspected, ForeignMountNS: p.ForeignMountNS, NSPid: p.NSPid, Files: p.Files}
			for _, r := range holders.Roles {
				for _, f := range p.Files {
					if f.Role == r && !f.Current {
						l.OrphanRoles = append(l.OrphanRoles, string(r))
						break
					}
				}
			}
			l.Orphan = len(l.OrphanRoles) > 0
			if l.Cmdline == nil {
				l.Cmdline = []string{}
			}
			out.Holders = append(out.Holders, l)
		}
	}
	return out
}
