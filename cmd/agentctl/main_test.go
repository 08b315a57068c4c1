package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// The in-process agent of the daemon tests runs with SQLite's OFD locking;
// the test process must switch before its first SQLite open (creating a
// fixture store included), as agentd does.
func TestMain(m *testing.M) { hermestest.RunWithOFDLocks(m) }

// agentctl speaks the control protocol and reads the journal without the
// daemon: package supervisor is not among its dependencies.
func TestNoDaemonInAgentctl(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "github.com/stateguard/stateguard/supervisor" {
			t.Fatal("agentctl imports the daemon (package supervisor)")
		}
	}
}

// Every verb's -h goes to stdout, exits 0 and lists its flags: the flag set
// is silenced while parsing, which once hid every flag list.
func TestEveryVerbHelpListsFlags(t *testing.T) {
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			r := ctl(t, noDaemon(t), c.name, "-h")
			if r.code != exitOK {
				t.Fatalf("agentctl %s -h: exit %d, want 0\nstderr: %s", c.name, r.code, r.stderr)
			}
			if !strings.HasPrefix(r.stdout, "usage: agentctl "+c.name) {
				t.Fatalf("agentctl %s -h: stdout does not start with its usage line:\n%s", c.name, r.stdout)
			}
			if !strings.Contains(r.stdout, "\n  -") {
				t.Fatalf("agentctl %s -h: no flag listed:\n%s", c.name, r.stdout)
			}
		})
	}
}
