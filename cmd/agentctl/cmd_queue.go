package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/stateguard/stateguard/journal"
)

func queueUsage(w io.Writer, fs *flag.FlagSet) {
	printUsage(w, fs, `usage: agentctl queue [--json] [--socket PATH] [--state-dir DIR]

Lists agentd's replay jobs. When agentd does not run, reads its journal
read-only and says so.
`, "")
}

func runQueue(ctx context.Context, e *env, args []string) int {
	v := newVerb(e, "queue", queueUsage)
	var df daemonFlags
	df.register(v.fs)
	asJSON := v.fs.Bool("json", false, "print the jobs as JSON (the control API's shape)")
	if _, code, ok := v.parseN(args, 0); !ok {
		return code
	}
	var jobs []journal.Job
	from, err := askOrJournal(ctx, e, &df, "/v1/jobs", &jobs, func(j *journal.Journal) (err error) {
		jobs, err = j.ListJobs(ctx, journal.JobFilter{})
		return err
	})
	if err != nil {
		return v.fail(err)
	}
	if jobs == nil {
		jobs = []journal.Job{}
	}
	return v.answer(from, *asJSON, jobs, func(w io.Writer) { printJobs(w, jobs) })
}

func printJobs(w io.Writer, jobs []journal.Job) {
	if len(jobs) == 0 {
		fmt.Fprintln(w, "No replay jobs.")
		return
	}
	t := newTable("", "ID", "STATE", "TRIES", "INCIDENT", "SESSION", "NOTE", "FILE")
	for _, j := range jobs {
		t.row(fmt.Sprint(j.ID), string(j.State), fmt.Sprint(j.Attempts), orDash(j.IncidentID), orDash(j.SessionID), jobNote(j), j.Path)
	}
	t.write(w)
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
