package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// Issue 33: ~20,000 idle connections to metrics.listen took every fd
// agentd had, and holder scans failed. Against the real binary with an
// open-file limit of 512 (hard too, so Go cannot raise it), 1,500 idle
// connections hold a bounded few of agentd's fds, and a restore under a
// live writer is still an incident.
func TestAgentdIdleMetricsConnectionsLeaveFDs(t *testing.T) {
	rig := newAgentdRig(t, "[metrics]\nlisten = \"127.0.0.1:0\"\n")
	db := filepath.Join(rig.home, "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	sh := fmt.Sprintf(`ulimit -n 512 && exec "$0" run --config %q`, rig.config)
	p := rig.startCmd(t, exec.Command("/bin/sh", "-c", sh, agentdBinary(t)))
	defer p.stop(t)
	line := p.waitLog(t, 60*time.Second, `"msg":"serving metrics"`)
	var rec struct{ Addr string }
	if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Addr == "" {
		t.Fatalf("serving metrics line without an address: %q (%v)", line, err)
	}
	p.waitLog(t, 30*time.Second, `"event":"agent.started"`)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 50})
	w.WaitAcks(t, 5)

	const idle = 1500 // bounded, loopback only
	for i := range idle {
		c, err := net.DialTimeout("tcp", rec.Addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		defer c.Close()
	}
	fds := func() int {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	t.Logf("agentd holds %d fds with %d idle metrics connections open", fds(), idle)
	if n := fds(); n > 256 {
		t.Errorf("agentd holds %d of its 512 fds with %d idle metrics connections", n, idle)
	}
	hermestest.RestoreOver(t, db)
	p.waitLog(t, 30*time.Second, `"event":"incident.opened"`, db)
}
