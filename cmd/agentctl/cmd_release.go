package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/incident"
)

func releaseUsage(w io.Writer, fs *flag.FlagSet) {
	printUsage(w, fs, `usage: agentctl release ID --resume|--terminate|--kill [--socket PATH]

Releases the frozen holders of an unfinished incident (one the hold policy
keeps frozen, or any other not yet captured):
  --resume     SIGCONT only; the process goes on writing to its orphan
  --terminate  SIGTERM, SIGCONT, then SIGKILL after the grace period
  --kill       SIGKILL while stopped, so no close-time code runs
Needs a running agentd.
`, "")
}

func runRelease(ctx context.Context, e *env, args []string) int {
	v := newVerb(e, "release", releaseUsage)
	socket := v.fs.String("socket", "", "agentd control socket (default $"+socketEnv+", else the agent's default)")
	resume := v.fs.Bool("resume", false, "resume the holders (SIGCONT)")
	terminate := v.fs.Bool("terminate", false, "terminate the holders (SIGTERM, grace, SIGKILL)")
	kill := v.fs.Bool("kill", false, "kill the holders (SIGKILL)")
	pos, code, ok := v.parseN(args, 1)
	if !ok {
		return code
	}
	var how []incident.Policy
	for _, c := range []struct {
		set bool
		p   incident.Policy
	}{{*resume, incident.PolicyResume}, {*terminate, incident.PolicyTerminate}, {*kill, incident.PolicyKill}} {
		if c.set {
			how = append(how, c.p)
		}
	}
	if len(how) != 1 {
		return v.usageError("give exactly one of --resume, --terminate, --kill")
	}
	id := pos[0]
	var ans struct {
		Incident string          `json:"incident"`
		Released incident.Policy `json:"released"`
	}
	err := newClient(socketPath(*socket, e.getenv)).post(ctx, "/v1/incidents/"+url.PathEscape(id)+"/release",
		control.ReleaseRequest{How: how[0]}, &ans)
	if errors.Is(err, errDaemonNotRunning) {
		fmt.Fprintf(e.stderr, "agentctl release: %v; releasing needs a running agentd (its holders stay as they are)\n", err)
		return exitError
	}
	if err != nil {
		return v.fail(err)
	}
	fmt.Fprintf(e.stdout, "incident %s: holders released (%s); see agentctl incident show %s\n", ans.Incident, ans.Released, ans.Incident)
	return exitOK
}
