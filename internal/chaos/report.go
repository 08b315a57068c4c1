package main

import (
	"fmt"
	"io"
	"os"
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

	Faults      map[string]int    // injected, by kind
	Skipped     map[string]string // never injected on this host, and why
	FaultErrors int               // faults that could not be carried out

	Acked       int // rows acknowledged by all writers
	Required    int // acknowledged after their profile's last restore
	Recovered   int // rows appended by replay jobs
	Lost        int
	Duplicated  int
	RolledBack  int // acknowledged before a restore and rolled back by it (allowed)
	Resurrected int // rolled back by a restore, then replayed back in
	// LostEarlier: acknowledged before a restore's backup began, yet in no
	// later backup and not in the store (a loss a later restore hid).
	LostEarlier          int
	AckedAfterRolledBack int // stamped before the last restore, acked after it, rolled back
	Unverifiable         int // missing, acked before a backup taken while an incident was unfinished

	CorruptStores    int
	MaxFreezeLog     time.Duration // from agentd's holder.frozen latency_ms
	Freezes          int
	FreezeP50        time.Duration
	FreezeP99        time.Duration
	MaxFreezeOutside time.Duration // fault syscall → writer seen stopped in /proc
	MaxResolution    time.Duration // incident opened_at → resolved_at

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

	AgentRestarts int
	AgentCrashes  []string
	WriterExits   map[string]int

	PerProfile []ProfileReport
	Problems   []string
}

func newReport(c Config) *Report {
	return &Report{Seed: c.Seed, Cycles: c.Cycles, Profiles: c.Profiles, Guard: c.Guard,
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
	add(r.Duplicated > 0, "%d rows duplicated", r.Duplicated)
	add(r.CorruptStores > 0, "%d corrupt stores", r.CorruptStores)
	add(len(r.Stopped) > 0, "%d processes left stopped", len(r.Stopped))
	add(len(r.Pinned) > 0, "%d fds left pinned on deleted inodes", len(r.Pinned))
	add(r.Unresolved != 0, "incidents unresolved")
	add(r.GuardBreaches > 0, "%d guard breaches", r.GuardBreaches)
	add(len(r.AgentCrashes) > 0, "agentd exited by itself %d times", len(r.AgentCrashes))
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
	total := 0
	for _, n := range r.Faults {
		total += n
	}
	row("cycles", "%d", total)
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
	row("incidents by kind", "%s (failed %d, unresolved %d)", mapString(r.Incidents), r.IncidentsFailed, max(r.Unresolved, 0))
	row("rows acknowledged", "%d (%d after their profile's last restore, %d rolled back by a restore)", r.Acked, r.Required, r.RolledBack)
	recovered := fmt.Sprintf("%d", r.Recovered)
	if !r.ReplayIntegrated {
		recovered += " (agentd diverted and queued nothing: replay not integrated)"
	}
	row("rows recovered by replay", "%s", recovered)
	row("lost", "%d (and %d lost before a later restore; %d unverifiable: backup taken mid-incident)", r.Lost, r.LostEarlier, r.Unverifiable)
	row("duplicated", "%d", r.Duplicated)
	row("corrupt stores", "%d", r.CorruptStores)
	row("max freeze latency", "%s agent log (p50 %s, p99 %s of %d freezes), %s seen from outside", ms(r.MaxFreezeLog),
		ms(r.FreezeP50), ms(r.FreezeP99), r.Freezes, ms(r.MaxFreezeOutside))
	row("max time to resolution", "%s", r.MaxResolution.Round(time.Millisecond))
	row("processes left stopped", "%s", listOrUnknown(r.Stopped, r.StoppedUnknown))
	row("captures left pinned", "%s", listOrUnknown(r.Pinned, r.PinnedUnknown))
	if r.Guard {
		row("guard breaches", "%d", r.GuardBreaches)
	} else {
		row("last-closer orphaned a WAL", "%d (guard off)", r.LastCloserFired)
	}
	row("capture deferred by full disk", "%d", r.CaptureDeferred)
	row("rolled-back rows replayed back", "%d (stamped before a restore, committed after its backup; agentd's cut margin)", r.Resurrected)
	row("acked after a restore, rolled back", "%d (stamped before it)", r.AckedAfterRolledBack)
	row("agentd restarts", "%d (crashes %d)", r.AgentRestarts, len(r.AgentCrashes))
	row("writer exits", "%s", mapString(r.WriterExits))
	row("replay jobs failed", "%d (pending %d)", r.JobsFailed, r.JobsPending)
	for _, p := range r.PerProfile {
		row("profile "+p.Name, "acked %d, required %d, lost %d, dup %d, restores %d, replayed back %d, integrity %s",
			p.Acked, p.Required, p.Lost, p.Duplicated, p.Restores, p.Resurrected, p.Integrity)
	}
	result := "PASS"
	if reasons := r.FailReasons(); len(reasons) > 0 {
		result = "FAIL: " + strings.Join(reasons, "; ")
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
