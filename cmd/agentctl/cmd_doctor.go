package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/stateguard/stateguard/service"
)

func doctorUsage(w io.Writer, fs *flag.FlagSet) {
	printUsage(w, fs, `usage: agentctl doctor [--json] [--config FILE]

Checks privileges, /proc hidepid, the holder verdict rule (and what this
privilege level can see and freeze), inotify limits, the embedded SQLite, the
config, the daemon, the service install, the state directory, every store's
owner and mode, waiting captures and failing replay jobs.
`, `Exit codes: 0 nothing needs action (warnings may remain), 1 something failed, 2 usage.
`)
}

func runDoctorVerb(ctx context.Context, e *env, args []string) int {
	v := newVerb(e, "doctor", doctorUsage)
	fs := v.fs
	asJSON := fs.Bool("json", false, "print the checks as JSON")
	configPath := fs.String("config", "", "agentd's config file (default "+service.SystemConfigPath+" as root, $XDG_CONFIG_HOME/stateguard/agent.toml otherwise)")
	if _, code, ok := v.parseN(args, 0); !ok {
		return code
	}
	in := defaultDoctorInput(e.getenv)
	if *configPath != "" {
		in.configPath, in.configExplicit = *configPath, true
	}
	checks := runDoctor(ctx, in)
	if *asJSON {
		return writeDoctorJSON(e.stdout, checks)
	}
	return writeDoctorText(e.stdout, checks)
}

// defaultDoctorInput looks at the real host.
func defaultDoctorInput(getenv func(string) string) doctorInput {
	euid := os.Geteuid()
	return doctorInput{
		goos:         runtime.GOOS,
		euid:         euid,
		getenv:       getenv,
		configPath:   service.DefaultConfigPath(getenv, euid),
		mountinfo:    "/proc/self/mountinfo",
		locks:        "/proc/locks",
		maxWatches:   "/proc/sys/fs/inotify/max_user_watches",
		maxInstances: "/proc/sys/fs/inotify/max_user_instances",
		now:          time.Now(),
		timeout:      2 * time.Second,
	}
}

func needsAction(checks []checkResult) bool {
	for _, c := range checks {
		if c.Status == statusFail {
			return true
		}
	}
	return false
}

func doctorExit(checks []checkResult) int {
	if needsAction(checks) {
		return exitError
	}
	return exitOK
}

func writeDoctorJSON(w io.Writer, checks []checkResult) int {
	if err := writeJSON(w, struct {
		Checks      []checkResult `json:"checks"`
		NeedsAction bool          `json:"needs_action"`
	}{checks, needsAction(checks)}); err != nil {
		return exitError
	}
	return doctorExit(checks)
}

func writeDoctorText(w io.Writer, checks []checkResult) int {
	fails, warns := 0, 0
	for _, c := range checks {
		label := map[checkStatus]string{statusOK: "ok", statusWarn: "WARN", statusFail: "FAIL"}[c.Status]
		fmt.Fprintf(w, "%-5s %-13s %s\n", label, c.Name, oneLine(c.Summary))
		for _, d := range c.Details {
			fmt.Fprintf(w, "%-19s - %s\n", "", oneLine(d))
		}
		if c.Fix != "" && c.Status != statusOK {
			fmt.Fprintf(w, "%-19s fix: %s\n", "", oneLine(c.Fix))
		}
		switch c.Status {
		case statusFail:
			fails++
		case statusWarn:
			warns++
		}
	}
	fmt.Fprintln(w)
	switch {
	case fails > 0:
		fmt.Fprintf(w, "%d check(s) need action, %d warning(s).\n", fails, warns)
	case warns > 0:
		fmt.Fprintf(w, "Nothing needs action; %d warning(s).\n", warns)
	default:
		fmt.Fprintln(w, "Everything checks out.")
	}
	return doctorExit(checks)
}

// oneLine keeps a path or an error with a newline from breaking the layout.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
