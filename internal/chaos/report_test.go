package main

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseFaults(t *testing.T) {
	cases := []struct {
		spec string
		want []string
	}{
		{"", Presets[DefaultPreset]},
		{"classic", ClassicFaults},
		{"all", AllFaults},
		{"tools", ToolFaults},
		{"cp-inplace", []string{FaultCpInplace}},
		{"classic,cp-inplace,restore-rename", append(slices.Clone(ClassicFaults), FaultCpInplace)},
		{" mispaired , tar-extract ", []string{FaultMispaired, FaultTarExtract}},
	}
	for _, c := range cases {
		got, err := ParseFaults(c.spec)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseFaults(%q) = %v, %v; want %v", c.spec, got, err, c.want)
		}
	}
	if _, err := ParseFaults("classic,cp-in-place"); err == nil || !strings.Contains(err.Error(), "cp-in-place") {
		t.Errorf("an unknown kind: err %v, want it named", err)
	}
	if len(AllFaults) != len(ClassicFaults)+len(ToolFaults)+len(DownFaults) {
		t.Errorf("AllFaults has %d kinds, want classic + tools + down", len(AllFaults))
	}
}

// TestPickEveryKindFirst: the first len(kinds) picks inject every kind
// once, whatever the seed, even when one cannot run at first.
func TestPickEveryKindFirst(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		p := []*profile{{name: "default"}, {name: "p1"}, {name: "p2"}}
		r := &run{cfg: Config{Guard: true}, e: &env{profiles: p, tmpfs: p[2]}, agent: &agentProc{up: true},
			rng: rand.New(rand.NewPCG(seed, seed))}
		r.kinds = slices.Clone(AllFaults)
		r.firstRound = slices.Clone(AllFaults)
		r.rng.Shuffle(len(r.firstRound), func(i, j int) { r.firstRound[i], r.firstRound[j] = r.firstRound[j], r.firstRound[i] })
		var got []string
		for range len(AllFaults) {
			kind, prof := r.pick()
			got = append(got, kind)
			switch kind {
			case FaultFullDisk:
				if prof != p[2] {
					t.Errorf("full-disk on %v, want the tmpfs profile", prof)
				}
			case FaultContainer:
				if prof != p[0] {
					t.Errorf("container-writer on %v, want the default profile", prof)
				}
			case FaultKillAgent:
				// Down for a moment, as after kill -9: the kinds that need
				// agentd give way and come up once it is back.
				r.agent.mu.Lock()
				r.agent.up = false
				r.agent.mu.Unlock()
				go func() {
					time.Sleep(100 * time.Millisecond)
					r.agent.mu.Lock()
					r.agent.up = true
					r.agent.mu.Unlock()
				}()
			}
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(AllFaults))
		if !slices.Equal(got, want) {
			t.Errorf("seed %d: first picks %v, want every kind once", seed, got)
		}
	}
}

func TestFailReasons(t *testing.T) {
	if r := (&Report{}); r.Failed() {
		t.Fatalf("an empty report fails: %v", r.FailReasons())
	}
	for name, r := range map[string]*Report{
		"failed incident":    {IncidentsFailed: 1},
		"leftover":           {Leftovers: 1},
		"lost during a tool": {DuringLost: 1},
		"lost earlier":       {LostEarlier: 1},
	} {
		if !r.Failed() {
			t.Errorf("%s: the run passes", name)
		}
	}
	if r := (&Report{IncidentsFailed: 1, Leftovers: 2, ReportOnly: true}); r.Failed() {
		t.Errorf("-acceptance=false: failed incidents and leftovers fail the run: %v", r.FailReasons())
	}
	if r := (&Report{IncidentsFailed: 1, Lost: 1, ReportOnly: true}); !r.Failed() {
		t.Error("-acceptance=false lets a lost row pass")
	}
	// Missing with an incident to count them is reported, not a failure.
	if r := (&Report{DuringTool: 5, DuringMissing: 3}); r.Failed() {
		t.Errorf("rows an incident saw fail the run: %v", r.FailReasons())
	}
	slow := &Report{Faults: map[string]int{FaultCpInplace: 100}, Resurrected: 2, FreezesSteady: 10,
		FreezeP99Steady: 60 * time.Millisecond, MaxResolutionSteady: 61 * time.Second}
	if slow.Failed() {
		t.Errorf("goals fail the run without -goals: %v", slow.FailReasons())
	}
	if got := len(slow.GoalsMissed()); got != 3 {
		t.Errorf("goals missed %q, want all three (20 replayed back per 1000 cycles)", slow.GoalsMissed())
	}
	slow.Goals = true
	if !slow.Failed() {
		t.Error("goals missed with -goals: the run passes")
	}
	fast := &Report{Faults: map[string]int{FaultCpInplace: 1000}, Resurrected: 10, FreezesSteady: 10,
		FreezeP99Steady: 49 * time.Millisecond, MaxResolutionSteady: 59 * time.Second, Goals: true}
	if fast.Failed() {
		t.Errorf("goals met fail the run: %v", fast.FailReasons())
	}
}

// TestWriteMarkdown: docs/chaos.md's table shape, with the verdict.
func TestWriteMarkdown(t *testing.T) {
	r := &Report{Seed: 1, Profiles: 3, Guard: true, Selected: ClassicFaults, Faults: map[string]int{FaultRestoreRename: 2},
		Incidents: map[string]int{"replaced": 2}, Acked: 100, Lost: 1, FreezeP50: 240 * time.Microsecond,
		FreezeP99: 516 * time.Millisecond, MaxResolution: 594 * time.Second}
	var b strings.Builder
	r.WriteMarkdown(&b)
	out := b.String()
	for _, want := range []string{"faults classic", "| | |\n|---|---|\n", "| cycles | 2 |", "| faults | restore-rename 2 |",
		"| lost (acknowledged after the profile's last restore) | **1** |", "p50 0.24 ms, p99 516 ms",
		"| max time to resolution | 9 min 54 s;", "| verdict | **FAIL**: 1 acknowledged rows lost |"} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[4:] {
		if !strings.HasPrefix(line, "| ") || !strings.HasSuffix(line, " |") || strings.Count(line, " | ") < 1 {
			t.Errorf("not a table row: %q", line)
		}
	}
}
