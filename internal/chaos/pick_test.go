package main

import (
	"math/rand/v2"
	"testing"
)

// TestRewritesWaitForTheAgent: the tools that rewrite what live writers
// hold where a starting agent cannot tell (the same inode, or a main
// renamed aside) are not picked while agentd is down or still starting;
// the restores, tar and sqlite3 .restore still are. A long chaos run's seed 3
// ran a mv-aside-copy 100 ms before agentd answered and lost p1 to
// corruption; seed 1 a cp-inplace while a restarted agent resumed.
func TestRewritesWaitForTheAgent(t *testing.T) {
	r := &run{agent: &agentProc{}, e: &env{profiles: []*profile{{name: "default"}, {name: "p1"}}},
		rng: rand.New(rand.NewPCG(1, 2))}
	for _, kind := range []string{FaultCpInplace, FaultRsyncInplace, FaultCpRmSidecars, FaultMvAsideCopy} {
		if _, ok := r.target(kind); ok {
			t.Errorf("%s can run with agentd down; want it to wait", kind)
		}
	}
	for _, kind := range []string{FaultRestoreRename, FaultRestoreDelete, FaultMispaired, FaultUnlink, FaultTarExtract, FaultSqlite3Restore} {
		if _, ok := r.target(kind); !ok {
			t.Errorf("%s waits for agentd; want it to land while agentd is down", kind)
		}
	}
	r.agent.up = true
	for _, kind := range []string{FaultCpInplace, FaultRsyncInplace, FaultCpRmSidecars, FaultMvAsideCopy} {
		if _, ok := r.target(kind); !ok {
			t.Errorf("%s cannot run with agentd up", kind)
		}
	}
}
