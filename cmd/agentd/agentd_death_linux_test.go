package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// dieWithTest has the kernel SIGKILL agentd when the thread that started
// it exits (see startCmd).
func dieWithTest(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// An agentd a test started outlives no test binary: the helper below
// starts one and is SIGKILLed, so none of its cleanups run (as when go
// test's -timeout ends a binary whose test still waits on a replay).
// Before startCmd set the parent-death signal, such an agentd ran on under
// pid 1 (one was found 54 minutes later, its --config in /tmp/sgsec3-*).
func TestAgentdDiesWithTestBinary(t *testing.T) {
	agentdBinary(t) // built here, so the helper does not build it again
	cmd := exec.Command(os.Args[0], "-test.run=^TestAgentdSpawnHelper$")
	cmd.Env = append(os.Environ(), "STATEGUARD_AGENTD_SPAWN_HELPER=1")
	cmd.Stderr = os.Stderr
	_, out := hermestest.StartPiped(t, cmd)
	line := hermestest.FirstLine(t, "the spawn helper", out, 2*time.Minute)
	pid, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("helper said %q, want agentd's pid", line)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if s := hermestest.StateOf(pid); s == 'X' || s == 'Z' {
		t.Fatalf("agentd %d not running before the kill (state %c)", pid, s)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	hermestest.Eventually(t, "agentd to die with the test binary that started it", 30*time.Second, func() bool {
		s := hermestest.StateOf(pid)
		return s == 'X' || s == 'Z'
	})
}

// TestAgentdSpawnHelper is the test binary TestAgentdDiesWithTestBinary
// kills: it starts agentd, prints its pid once it serves, and waits.
func TestAgentdSpawnHelper(t *testing.T) {
	if os.Getenv("STATEGUARD_AGENTD_SPAWN_HELPER") == "" {
		t.Skip("helper process of TestAgentdDiesWithTestBinary")
	}
	r := newAgentdRig(t, "")
	p := r.start(t)
	p.waitLog(t, 60*time.Second, `"event":"agent.started"`)
	fmt.Println(p.cmd.Process.Pid)
	<-p.done // agentd runs until the parent test kills this process
}
