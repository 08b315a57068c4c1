package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// Issue 33: alice makes her own incident's capture impossible (here a
// capture budget too small for it; a full disk or a swapped directory do
// the same) so that the incident waits in needs_action, retrying, with the
// orphan's writer frozen. SIGSTOP outlives agentd: unbounded, any process
// that holds her store stays stopped for good. Past the frozen limit
// agentd resumes it with an error event, and the orphan stays pinned.
func TestAttackNeedsActionFrozenIsBounded(t *testing.T) {
	base := trustBase(t)
	alice := newTrustUser(t, base, "sgsec4-n1-alice")
	r := trustRig(t, base, "[policy]\nfrozen_limit = \"3s\"\n[capture]\nmax_bytes = 1024\n", alice.hermes)
	p := r.start(t)
	p.waitLog(t, 30*time.Second, `"event":"agent.started"`)
	w := alice.writer(t, "alice-s")
	p.waitLog(t, 30*time.Second, `"event":"guard.armed"`, alice.store())

	alice.as(t, replaceStore, alice.store())
	id := logField(t, p.waitLog(t, 30*time.Second, `"event":"incident.opened"`, alice.store()), "incident")
	waitIncidentState(t, r.socket, id, 30*time.Second, func(i incidentOf) bool { return i.Incident.State == "needs_action" })
	if s := hermestest.StateOf(w.Pid); s != 'T' && s != 't' {
		t.Fatalf("the orphan's writer is not frozen in needs_action (state %c)", s)
	}
	line := expectLog(t, p, 30*time.Second, `"event":"incident.frozen_limit"`, id)
	if line != "" && !strings.Contains(line, `"level":"ERROR"`) {
		t.Errorf("incident.frozen_limit is not an error: %s", line)
	}
	w.AcksGrow(t, 5) // running again
	inc := waitIncidentState(t, r.socket, id, 30*time.Second, func(i incidentOf) bool { return i.Incident.State != "needs_action" })
	t.Logf("incident after the limit: %s %q", inc.Incident.State, inc.Incident.Detail.Error)
	stopWithin(t, p, agentdCloseTimeout)
}
