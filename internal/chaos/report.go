package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a chaos run measured.
type Report struct {
	Seed     uint64
	Cycles   int
	Profiles int
	Guard    bool
	Duration time.Duration
	Dir      string // the temp tree, when kept

	Selected    []string          // the kinds -faults selected
	Faults      map[string]int    // injected, by kind
	Skipped     map[string]string // selected but never injected on this host, and why
	FaultErrors int               // faults that could not be carried out
	Goals       bool              // issue 18's goals fail the run when missed (-goals)
	// ReportOnly: failed incidents and leftovers are printed, not failing
	// the run (-acceptance=false).
	ReportOnly bool

	Acked       int // rows acknowledged by all writers
	Required    int // acknowledged after their profile's last restore
	Recovered   int // rows appended by replay jobs
	Lost        int
	Duplicated  int
	RolledBack  int // acknowledged before a restore and rolled back by it (allowed)
	Resurrected int // rolled back by a restore, then replayed back in
	// ResurrectedBy counts Resurrected by the divert that replayed them.
	ResurrectedBy map[string]int
	// OrphanReplayed looked like Resurrected, but only a divert of an
	// earlier replacement replayed them: committed into its orphan after
	// it (ProfileReport.OrphanReplayed), kept as they must be.
	OrphanReplayed int
	// LostEarlier: acknowledged before a restore's backup began, yet in no
	// later backup and not in the store (a loss a later restore hid).
	LostEarlier          int
	AckedAfterRolledBack int            // stamped before a restore began, acked after it began, rolled back
	StraddleKept         int            // stamped before a restore began, acked after it began, not in its backup, there
	NotRolledBack        int            // like Resurrected, but no replay wrote them: the restore did not take
	NotRolledBackBy      map[string]int // NotRolledBack by the restore's fault kind
	Unverifiable         int            // missing, acked before a backup taken while an incident was unfinished
	// Rows stamped while a restore tool wrote the store: how many, how
	// many are missing though an incident saw the tool (the incident's to
	// salvage or count), and how many are missing with no incident.
	DuringTool    int
	DuringMissing int
	// DuringRolledBack: stamped while sqlite3 .restore ran, committed
	// before its backup API took the write lock, rolled back by it.
	DuringRolledBack int
	DuringLost       int
	Leftovers        int // files left in profile directories (ProfileReport.Leftovers)

	CorruptStores    int
	MaxFreezeLog     time.Duration // from agentd's holder.frozen latency_ms
	Freezes          int
	FreezeP50        time.Duration
	FreezeP99        time.Duration
	MaxFreezeOutside time.Duration // fault syscall → writer seen stopped in /proc
	// FreezeP99Steady is the p99 of the freezes logged more than
	// restartQuiet after an agentd start (FreezesSteady of them).
	FreezeP99Steady time.Duration
	FreezesSteady   int
	// SlowFreezes are the slowest steady freezes over the goal, with the
	// incident kind that froze them.
	SlowFreezes   []string
	MaxResolution time.Duration // incident opened_at → resolved_at
	// MaxResolutionSteady leaves out incidents that said the disk was
	// full (a needs_action step naming it); DiskFullSlow counts those
	// that took longer than the goal.
	MaxResolutionSteady time.Duration
	DiskFullSlow        int

	Incidents        map[string]int // by kind
	IncidentsFailed  int
	Unresolved       int // -1 when the API could not be read
	JobsFailed       int
	JobsPending      int
	ReplayIntegrated bool // the daemon diverted or queued replays at all

	Stopped         []string
	StoppedUnknown  string
	Pinned          []string
	PinnedUnknown   string
	GuardBreaches   int
	LastCloserFired int // unguarded: the CLI orphaned the live WAL
	CaptureDeferred int // full disk: the agent kept the orphan pinned and retried
	// BackupsRetaken: the harness's backup failed quick_check (it read a
	// store between an in-place rewrite and the agent's quarantine) and
	// was taken again.
	BackupsRetaken int

	AgentRestarts int
	AgentCrashes  []string
	WriterExits   map[string]int

	PerProfile []ProfileReport
	Problems   []string
}

func newReport(c Config) *Report {
	return &Report{Seed: c.Seed, Cycles: c.Cycles, Profiles: c.Profiles, Guard: c.Guard, Goals: c.Goals, ReportOnly: c.ReportOnlyAcceptance,
		Faults: map[string]int{}, Skipped: map[string]string{}, Incidents: map[string]int{}, WriterExits: map[string]int{}}
}

// FailReasons lists why the run breaks the promise; empty when it passes.
func (r *Report) FailReasons() []string {
	var out []string
	add := func(cond bool, format string, args ...any) {
		if cond {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	add(r.Lost > 0, "%d acknowledged rows lost", r.Lost)
	add(r.LostEarlier > 0, "%d acknowledged rows lost before a later restore", r.LostEarlier)
	add(r.DuringLost > 0, "%d rows committed while a tool rewrote the store lost with no incident", r.DuringLost)
	add(r.Duplicated > 0, "%d rows duplicated", r.Duplicated)
	add(r.CorruptStores > 0, "%d corrupt stores", r.CorruptStores)
	add(r.IncidentsFailed > 0 && !r.ReportOnly, "%d incidents failed", r.IncidentsFailed)
	add(r.Leftovers > 0 && !r.ReportOnly, "%d files left in profile directories", r.Leftovers)
	add(len(r.Stopped) > 0, "%d processes left stopped", len(r.Stopped))
	add(len(r.Pinned) > 0, "%d fds left pinned on deleted inodes", len(r.Pinned))
	add(r.Unresolved != 0, "incidents unresolved")
	add(r.GuardBreaches > 0, "%d guard breaches", r.GuardBreaches)
	add(len(r.AgentCrashes) > 0, "agentd exited by itself %d times", len(r.AgentCrashes))
	if r.Goals {
		for _, g := range r.GoalsMissed() {
			out = append(out, "goal missed: "+g)
		}
	}
	return out
}

// Failed reports whether the run found a broken promise.
func (r *Report) Failed() bool { return len(r.FailReasons()) > 0 }

// WriteTable prints the run's one table, then the problems to look at.
func (r *Report) WriteTable(w io.Writer) {
	guard := "off"
	if r.Guard {
		guard = "on"
	}
	host, _ := os.Hostname()
	fmt.Fprintf(w, "stateguard chaos run: seed %d, %d profiles, guard %s, %s, %s\n", r.Seed, r.Profiles, guard,
		r.Duration.Round(time.Second), host)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "  %s\t%s\n", k, fmt.Sprintf(format, args...)) }
	r.faultRows(row)
	r.figureRows(row)
	result := "PASS"
	if reasons := r.FailReasons(); len(reasons) > 0 {
		result = "FAIL: " + strings.Join(reasons, "; ")
	}
	if r.ReportOnly && (r.IncidentsFailed > 0 || r.Leftovers > 0) {
		result += fmt.Sprintf(" (reported only, -acceptance=false: %d incidents failed, %d files left in profile directories)",
			r.IncidentsFailed, r.Leftovers)
	}
	row("result", "%s", result)
	tw.Flush()
	if len(r.Problems) > 0 {
		fmt.Fprintln(w, "problems:")
		for i, p := range r.Problems {
			if i == 30 {
				fmt.Fprintf(w, "  ... and %d more (chaos.log)\n", len(r.Problems)-i)
				break
			}
			fmt.Fprintf(w, "  - %s\n", p)
		}
	}
	for _, c := range r.AgentCrashes {
		fmt.Fprintf(w, "%s\n", c)
	}
	if r.Dir != "" {
		fmt.Fprintf(w, "kept: %s (logs/chaos.log has the fault sequence, logs/agentd-*.log the agent)\n", r.Dir)
	}
}

// faultRows are the table's rows about what was injected.
func (r *Report) faultRows(row func(k, format string, args ...any)) {
	total := 0
	for _, n := range r.Faults {
		total += n
	}
	row("cycles", "%d", total)
	row("faults selected", "%s", selectedString(r.Selected))
	var fs []string
	for _, k := range AllFaults {
		if n, ok := r.Faults[k]; ok {
			fs = append(fs, fmt.Sprintf("%s %d", k, n))
		}
	}
	row("faults by kind", "%s", strings.Join(fs, ", "))
	for _, k := range AllFaults {
		if why, ok := r.Skipped[k]; ok {
			row("  skipped "+k, "%s", why)
		}
	}
	if r.FaultErrors > 0 {
		row("faults not carried out", "%d (see chaos.log)", r.FaultErrors)
	}
}

// figureRows are the table's rows about what the run measured.
func (r *Report) figureRows(row func(k, format string, args ...any)) {
	row("incidents by kind", "%s (failed %d, unresolved %d)", mapString(r.Incidents), r.IncidentsFailed, max(r.Unresolved, 0))
	row("rows acknowledged", "%d (%d after their profile's last restore, %d rolled back by a restore)", r.Acked, r.Required, r.RolledBack)
	recovered := fmt.Sprintf("%d", r.Recovered)
	if !r.ReplayIntegrated {
		recovered += " (agentd diverted and queued nothing: replay not integrated)"
	}
	row("rows recovered by replay", "%s", recovered)
	row("lost", "%d (and %d lost before a later restore; %d unverifiable: backup taken mid-incident, or incidents not read)", r.Lost, r.LostEarlier, r.Unverifiable)
	row("committed while a tool wrote", "%d (missing %d with an incident to salvage or count them, %d lost with no incident; "+
		"%d rolled back by sqlite3 .restore, committed before its write lock)",
		r.DuringTool, r.DuringMissing, r.DuringLost, r.DuringRolledBack)
	row("duplicated", "%d", r.Duplicated)
	row("corrupt stores", "%d", r.CorruptStores)
	row("left in profile directories", "%d", r.Leftovers)
	row("freeze latency", "agent log: p50 %s, p99 %s, max %s of %d freezes; p99 %s of %d outside %s after an agentd start; %s max seen from outside",
		ms(r.FreezeP50), ms(r.FreezeP99), ms(r.MaxFreezeLog), r.Freezes, ms(r.FreezeP99Steady), r.FreezesSteady, secText(restartQuiet), ms(r.MaxFreezeOutside))
	if len(r.SlowFreezes) > 0 {
		row("  steady freezes over the goal", "%s", strings.Join(r.SlowFreezes, "; "))
	}
	row("max time to resolution", "%s (%s leaving out incidents that said the disk was full; %d of those over %s)",
		r.MaxResolution.Round(time.Millisecond), r.MaxResolutionSteady.Round(time.Millisecond), r.DiskFullSlow, secText(goalResolution))
	row("processes left stopped", "%s", listOrUnknown(r.Stopped, r.StoppedUnknown))
	row("captures left pinned", "%s", listOrUnknown(r.Pinned, r.PinnedUnknown))
	if r.Guard {
		row("guard breaches", "%d", r.GuardBreaches)
	} else {
		row("last-closer orphaned a WAL", "%d (guard off)", r.LastCloserFired)
	}
	row("capture deferred by full disk", "%d", r.CaptureDeferred)
	row("backups taken again", "%d (damaged: read between an in-place rewrite and the quarantine)", r.BackupsRetaken)
	row("rolled-back rows replayed back", "%d, %.1f per 1000 cycles (acked after a restore's backup began and before the restore began)",
		r.Resurrected, r.resurrectedPer1000())
	if r.Resurrected > 0 {
		row("  replayed back by", "%s", sourcesString(r.ResurrectedBy))
	}
	row("  of an earlier orphan", "%d (acked as above, replayed only by the divert of an earlier replacement: committed into its orphan after it, never in what the restore rolled back; kept)", r.OrphanReplayed)
	row("acked after a restore began", "%d rolled back, %d kept (stamped before it)", r.AckedAfterRolledBack, r.StraddleKept)
	row("not rolled back by a restore", "%d (acked after its backup began, before it began, there, no replay wrote them: the store is not the backup)", r.NotRolledBack)
	if r.NotRolledBack > 0 {
		row("  by restore kind", "%s", mapString(r.NotRolledBackBy))
	}
	row("agentd restarts", "%d (crashes %d)", r.AgentRestarts, len(r.AgentCrashes))
	row("writer exits", "%s", mapString(r.WriterExits))
	row("replay jobs failed", "%d (pending %d)", r.JobsFailed, r.JobsPending)
	for _, p := range r.PerProfile {
		var dmg []string
		if p.Damaged != "" {
			dmg = append(dmg, "store malformed, read by id: "+p.Damaged)
		}
		if p.DamagedBackups > 0 {
			dmg = append(dmg, fmt.Sprintf("%d backups malformed, read by id: %d ranges unreadable", p.DamagedBackups, p.DamagedBackupRanges))
		}
		damaged := ""
		if len(dmg) > 0 {
			damaged = " (" + strings.Join(dmg, "; ") + ")"
		}
		row("profile "+p.Name, "acked %d, required %d, lost %d%s, dup %d, restores %d, during a tool %d/%d missing, replayed back %d, leftovers %d, integrity %s",
			p.Acked, p.Required, p.Lost, damaged, p.Duplicated, p.Restores, p.DuringMissing+p.DuringLost, p.DuringTool, p.Resurrected,
			len(p.Leftovers), clip(p.Integrity))
	}
	missed := r.GoalsMissed()
	goals := fmt.Sprintf("freeze p99 < %s: %s; resolution < %s: %s; replayed back ≤ %d per 1000 cycles: %s",
		msText(goalFreezeP99), goalMark(r.FreezesSteady == 0 || r.FreezeP99Steady < goalFreezeP99),
		secText(goalResolution), goalMark(r.MaxResolutionSteady < goalResolution),
		goalResurrectedPer1000, goalMark(r.resurrectedPer1000() <= goalResurrectedPer1000))
	if !r.Goals && len(missed) > 0 {
		goals += " (printed only; -goals makes them fail the run)"
	}
	row("goals (issue 18)", "%s", goals)
}

// clip shortens what integrity_check said (it lists every broken row)
// to one readable line; chaos.log has all of it.
func clip(s string) string {
	s = strings.ReplaceAll(s, "\n", "; ")
	if len(s) > 200 {
		return s[:200] + " ..."
	}
	return s
}

// selectedString names the selection by its preset when it is one.
func selectedString(sel []string) string {
	for _, name := range []string{"classic", "tools", "all"} {
		if slices.Equal(sel, Presets[name]) {
			return name + " (" + strings.Join(sel, ", ") + ")"
		}
	}
	return strings.Join(sel, ", ")
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000)
}

func listOrUnknown(l []string, unknown string) string {
	switch {
	case len(l) > 0:
		return fmt.Sprintf("%d: %s", len(l), strings.Join(l, "; "))
	case unknown != "":
		return "unknown (" + unknown + ")"
	}
	return "0"
}

func mapString(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// logTail is the last n lines of a file, for a crash report.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
