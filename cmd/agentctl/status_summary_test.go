package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
)

// The summary counts incidents and queued replays and lists their stores
// and orphaned ones; stores whose only concern is an unknown verdict are
// counted, with the first uninspected process, not listed.
func TestPrintSummaryAttention(t *testing.T) {
	armed := &control.GuardStatus{State: control.GuardArmed}
	st := control.Status{Daemon: control.DaemonStatus{Running: true, PID: 7}}
	for i := range 40 {
		st.Stores = append(st.Stores, control.StoreStatus{Profile: fmt.Sprintf("p%02d", i), Home: "/h", Path: fmt.Sprintf("/h/profiles/p%02d/state.db", i),
			Kind: "hermes", Verdict: holders.VerdictClear, Guard: armed})
	}
	st.Stores[3].Incidents = []control.IncidentSummary{{ID: "inc-1", Kind: journal.KindReplaced, State: "pinned"}}
	st.Stores[3].QueuedReplays = 2
	st.Stores[5].Verdict, st.Stores[5].Orphans = holders.VerdictHeld, 1
	st.Stores[5].Holders = []holders.Process{{Pid: 99, Files: []holders.Held{{Role: holders.RoleWAL}}}}
	for _, i := range []int{8, 9} {
		st.Stores[i].Verdict = holders.VerdictUnknown
		st.Stores[i].Blind = []holders.Blind{{Pid: 1, Reason: "permission denied"}}
	}
	var b strings.Builder
	printSummary(&b, st)
	out := b.String()
	mustContain(t, "summary", out, "40 stores (hermes 40) in 1 home(s)", "clear 37 · held 1 · unknown 2", "armed 40",
		"1 open on 1 store(s)", "2 queued", "Stores needing attention (2;", "why listed: 1 open incident(s), 2 queued replay(s)",
		"why listed: orphan holder", "2 store(s) not listed whose only concern is an unknown verdict (first not inspected: pid 1: permission denied)")
	for _, p := range []string{"p08  ", "p09  ", "p10  "} {
		if strings.Contains(out, p) {
			t.Errorf("summary lists %s:\n%s", p, out)
		}
	}
}
