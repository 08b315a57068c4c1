package main

// The summary form of agentctl status, for homes with many stores: the
// counts first, then only the stores that need the operator. 10,000
// stores printed one block each were 80,000 lines nobody reads.

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/holders"
)

// summaryAbove is the store count above which status leads with a
// summary unless --all is given.
const summaryAbove = 20

// attention is why a store is listed in the summary form ("" for none).
// An unknown verdict alone is counted, not listed: one blind process
// usually makes every store unknown at once, and listing them all is the
// flood the summary avoids.
func attention(s control.StoreStatus) string {
	var why []string
	if s.Orphans > 0 || slices.ContainsFunc(s.Holders, func(p holders.Process) bool { return p.Orphan() }) {
		why = append(why, "orphan holder")
	}
	if len(s.Incidents) > 0 {
		why = append(why, fmt.Sprintf("%d open incident(s)", len(s.Incidents)))
	}
	if s.QueuedReplays > 0 {
		why = append(why, fmt.Sprintf("%d queued replay(s)", s.QueuedReplays))
	}
	if s.Error != "" {
		why = append(why, "generation unreadable")
	}
	if s.Guard != nil && s.Guard.State == control.GuardPaused {
		why = append(why, "guard paused")
	}
	return strings.Join(why, ", ")
}

// printSummary writes the counts, then the stores needing attention, then
// problems and the daemon line as the full form does.
func printSummary(w io.Writer, st control.Status) {
	var list []control.StoreStatus
	verdicts, guards, kinds := map[string]int{}, map[string]int{}, map[string]int{}
	homes := map[string]bool{}
	incidents, withIncidents, replays, unknownOnly := 0, 0, 0, 0
	var blindSample string
	for _, s := range st.Stores {
		v := string(s.Verdict)
		if v == "" {
			v = string(holders.VerdictUnknown)
		}
		verdicts[v]++
		g := "none"
		if s.Guard != nil {
			g = s.Guard.State
		}
		guards[g]++
		kinds[s.Kind]++
		homes[s.Home] = true
		incidents += len(s.Incidents)
		if len(s.Incidents) > 0 {
			withIncidents++
		}
		replays += s.QueuedReplays
		switch {
		case attention(s) != "":
			list = append(list, s)
		case !storeSafe(s):
			unknownOnly++
			if blindSample == "" && len(s.Blind) > 0 {
				blindSample = fmt.Sprintf("pid %d: %s", s.Blind[0].Pid, s.Blind[0].Reason)
			}
		}
	}
	fmt.Fprintf(w, "%d stores (%s) in %d home(s)\n", len(st.Stores), countsText(kinds, "hermes", "generic"), len(homes))
	kv := newTable("  ")
	kv.row("verdict", countsText(verdicts, string(holders.VerdictClear), string(holders.VerdictHeld), string(holders.VerdictUnknown)))
	kv.row("guard", countsText(guards, control.GuardArmed, control.GuardUnavailable, control.GuardPaused, control.GuardOff, "none"))
	if st.Daemon.Running {
		kv.row("incidents", fmt.Sprintf("%d open on %d store(s)", incidents, withIncidents))
		kv.row("replays", fmt.Sprintf("%d queued", replays))
	}
	kv.write(w)
	if unknownOnly > 0 {
		line := fmt.Sprintf("%d store(s) not listed whose only concern is an unknown verdict", unknownOnly)
		if blindSample != "" {
			line += " (first not inspected: " + blindSample + ")"
		}
		fmt.Fprintln(w, cleanCell(line+"; --all lists them"))
	}
	fmt.Fprintln(w)
	if len(list) == 0 {
		fmt.Fprintln(w, "No store needs attention (--all lists every store).")
	} else {
		fmt.Fprintf(w, "Stores needing attention (%d; --all lists every store):\n\n", len(list))
		for i, s := range list {
			if i > 0 {
				fmt.Fprintln(w)
			}
			printStore(w, s, st.Daemon.Running)
			fmt.Fprintln(w, "  why listed: "+attention(s))
		}
	}
	printTail(w, st)
}

// countsText is "clear 9990 · held 10", in the order given, then any
// other key; zero counts are left out.
func countsText(m map[string]int, order ...string) string {
	var parts []string
	for _, k := range order {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	var rest []string
	for k := range m {
		if !slices.Contains(order, k) && m[k] > 0 {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range rest {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " · ")
}
