package main

import (
	"testing"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/service"
)

func TestAgentOptions(t *testing.T) {
	cfg, err := service.Parse([]byte("verdict = \"strict\"\n[policy]\nreplaced = \"hold\"\n[[store]]\npath = \"/s/state.db\"\nguard = false\npolicy.sidecar_lost = \"observe\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	o := agentOptions(cfg, nil)
	if o.Verdict != holders.RuleStrict {
		t.Errorf("verdict %q", o.Verdict)
	}
	if o.Policies.Replaced != incident.PolicyHold || o.StorePolicies["/s/state.db"].SidecarLost != incident.PolicyObserve ||
		o.StorePolicies["/s/state.db"].Replaced != incident.PolicyHold {
		t.Errorf("policies %+v, store %+v", o.Policies, o.StorePolicies)
	}
	if g, ok := o.StoreGuard["/s/state.db"]; !ok || g || !o.Guard {
		t.Errorf("guard %v, store guard %v", o.Guard, o.StoreGuard)
	}
}
