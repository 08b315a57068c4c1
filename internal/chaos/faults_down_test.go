package main

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The while-down kinds are in "all" (not yet in the default mix, which
// holds only the kinds the product passes), run the tool of their base
// kind, and start from an agent that is up (they stop it).
func TestDownFaults(t *testing.T) {
	got, err := ParseFaults("all")
	if err != nil {
		t.Fatal(err)
	}
	r := &run{agent: &agentProc{}, e: &env{profiles: []*profile{{name: "default"}}}, rng: rand.New(rand.NewPCG(1, 2))}
	for _, k := range DownFaults {
		if !slices.Contains(got, k) {
			t.Errorf("%s not in the mix of all %v", k, got)
		}
		if toolScript(downBase(k), "/b.db", "state.db.old") == "" || toolNeeds(k) == "" {
			t.Errorf("%s: no tool to run", k)
		}
		if _, ok := r.target(k); ok {
			t.Errorf("%s picked with agentd down", k)
		}
	}
	r.agent.up = true
	for _, k := range DownFaults {
		if _, ok := r.target(k); !ok {
			t.Errorf("%s not picked with agentd up", k)
		}
	}
	if down, err := ParseFaults("down"); err != nil || !slices.Equal(down, DownFaults) {
		t.Errorf("ParseFaults(down) = %v, %v", down, err)
	}
}
