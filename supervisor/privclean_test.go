//go:build unix

package supervisor

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A stateguard-capture-* directory in the temp dir whose owner.pid is a
// FIFO (another user planted it) does not keep the agent from starting,
// and the clean-up after start-up removes it.
func TestAgentStartsWithAFIFOAsPrivateOwnerFile(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	bad := filepath.Join(tmp, "stateguard-capture-planted")
	if err := os.Mkdir(bad, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(bad, "owner.pid"), 0o600); err != nil {
		t.Fatal(err)
	}
	home, _ := testHome(t)
	started := make(chan *Agent, 1)
	go func() { started <- startAgent(t, home, nil) }()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not start in 20s with a FIFO as a private copy's owner file")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Lstat(bad); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not removed 10s after start", bad)
		}
	}
}
