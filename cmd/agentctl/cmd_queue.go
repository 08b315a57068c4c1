package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/stateguard/stateguard/journal"
)

func queueUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: agentctl queue [--json] [--socket PATH] [--state-dir DIR]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Lists agentd's replay jobs. When agentd does not run, reads its journal")
	fmt.Fprintln(w, "read-only and says so.")
	fmt.Fprintln(w)
	fs.PrintDefaults()
}

func runQueue(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("queue", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var df daemonFlags
	df.register(fs)
	asJSON := fs.Bool("json", false, "print the jobs as JSON (the control API's shape)")
	if _, code, ok := parseOrUsage(e, fs, args, 0, queueUsage); !ok {
		return code
	}
	var jobs []journal.Job
	err := newClient(socketPath(df.socket, e.getenv)).get(ctx, "/v1/jobs", &jobs)
	var from *journal.Journal
	if errors.Is(err, errDaemonNotRunning) {
		if from, err = openJournal(ctx, &df, e.getenv, err); err == nil {
			defer from.Close()
			jobs, err = from.ListJobs(ctx, journal.JobFilter{})
		}
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "agentctl queue: %v\n", err)
		return exitError
	}
	if jobs == nil {
		jobs = []journal.Job{}
	}
	if *asJSON {
		if from != nil {
			fmt.Fprintf(e.stderr, "agentctl queue: %s\n", journalLabel(from))
		}
		if err := writeJSON(e.stdout, jobs); err != nil {
			fmt.Fprintf(e.stderr, "agentctl queue: %v\n", err)
			return exitError
		}
		return exitOK
	}
	if from != nil {
		fmt.Fprintf(e.stdout, "(%s)\n", journalLabel(from))
	}
	if len(jobs) == 0 {
		fmt.Fprintln(e.stdout, "No replay jobs.")
		return exitOK
	}
	t := newTable("", "ID", "STATE", "TRIES", "INCIDENT", "SESSION", "NOTE", "FILE")
	for _, j := range jobs {
		t.row(fmt.Sprint(j.ID), string(j.State), fmt.Sprint(j.Attempts), orDash(j.IncidentID), orDash(j.SessionID), jobNote(j), j.Path)
	}
	t.write(e.stdout)
	return exitOK
}

// jobNote is what an operator wants to know next about a job.
func jobNote(j journal.Job) string {
	switch {
	case j.State == journal.JobDone && j.Result != nil:
		n := fmt.Sprintf("appended %d, already present %d", j.Result.Appended, j.Result.Skipped)
		if j.Result.Invalid > 0 {
			n += fmt.Sprintf(", %d invalid lines", j.Result.Invalid)
		}
		return n
	case j.State == journal.JobFailed:
		return "gave up: " + j.LastError
	case j.State == journal.JobQueued && j.LastError != "":
		return "retry at " + stamp(j.NextAttemptAt) + ": " + j.LastError
	case j.State == journal.JobQueued:
		return "store " + j.Store
	}
	return ""
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
