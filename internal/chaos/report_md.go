package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteMarkdown prints the run as docs/chaos.md's results table: a header
// line with the command's shape, then one row per figure. Counts that
// must be zero for a PASS are bold.
func (r *Report) WriteMarkdown(w io.Writer) {
	guard := "off"
	if r.Guard {
		guard = "on"
	}
	fmt.Fprintf(w, "seed %d, %d profiles, guard %s, faults %s, %s:\n\n", r.Seed, r.Profiles, guard,
		selectedName(r.Selected), r.Duration.Round(time.Second))
	fmt.Fprintln(w, "| | |")
	fmt.Fprintln(w, "|---|---|")
	row := func(k, format string, args ...any) { fmt.Fprintf(w, "| %s | %s |\n", k, fmt.Sprintf(format, args...)) }
	bold := func(n int) string { return fmt.Sprintf("**%d**", n) }
	row("cycles", "%d", r.cyclesRun())
	var fs []string
	for _, k := range AllFaults {
		if n, ok := r.Faults[k]; ok {
			fs = append(fs, fmt.Sprintf("%s %d", k, n))
		}
	}
	row("faults", "%s", strings.Join(fs, ", "))
	row("incidents", "%s (%d failed, %d unresolved)", mapString(r.Incidents), r.IncidentsFailed, max(r.Unresolved, 0))
	row("rows acknowledged", "%d", r.Acked)
	row("rows recovered by replay", "%d", r.Recovered)
	row("lost (acknowledged after the profile's last restore)", "%s", bold(r.Lost))
	row("lost before a later restore (the harness's stricter extra check)", "%s", bold(r.LostEarlier))
	row("committed while a tool rewrote the store", "%d: %d missing with an incident to salvage or count them, %s lost with none, "+
		"%d rolled back by sqlite3 .restore (committed before its write lock)",
		r.DuringTool, r.DuringMissing, bold(r.DuringLost), r.DuringRolledBack)
	row("duplicated", "%s", bold(r.Duplicated))
	row("corrupt stores", "%s", bold(r.CorruptStores))
	row("failed incidents", "%s", bold(r.IncidentsFailed))
	row("left in profile directories", "%s", bold(r.Leftovers))
	row("freeze latency (agent log)", "p50 %s, p99 %s of %d; p99 %s of %d outside %s after an agentd restart (goal < %s)",
		msText(r.FreezeP50), msText(r.FreezeP99), r.Freezes, msText(r.FreezeP99Steady), r.FreezesSteady, secText(restartQuiet),
		msText(goalFreezeP99))
	row("max time to resolution", "%s; %s leaving out %d incidents that said the disk was full (goal < %s)",
		secText(r.MaxResolution), secText(r.MaxResolutionSteady), r.DiskFullSlow, secText(goalResolution))
	row("rolled-back rows replayed back", "%d (%.1f per 1000 cycles; goal ≤ %d)", r.Resurrected, r.resurrectedPer1000(),
		goalResurrectedPer1000)
	row("rows a restore did not roll back (the store is not the backup)", "%d", r.NotRolledBack)
	row("processes left stopped / captures left pinned / guard breaches", "%d / %d / %d", len(r.Stopped), len(r.Pinned),
		r.GuardBreaches)
	verdict := "**PASS**"
	if reasons := r.FailReasons(); len(reasons) > 0 {
		verdict = "**FAIL**: " + strings.Join(reasons, "; ")
	}
	row("verdict", "%s", verdict)
}

// selectedName is the preset's name when the selection is one, else the
// kinds.
func selectedName(sel []string) string {
	s := selectedString(sel)
	if i := strings.Index(s, " ("); i > 0 {
		return s[:i]
	}
	return s
}

// msText is a duration in docs/chaos.md's style: "0.24 ms", "516 ms".
func msText(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000)
}

// secText is a duration in docs/chaos.md's style: "33.7 s", "60 s",
// "9 min 54 s".
func secText(d time.Duration) string {
	switch {
	case d%time.Second == 0 && d < time.Minute*2:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d >= time.Minute:
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}
