package hermestest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A writer outlives no test binary: killed from outside (no cleanup runs),
// the helper below leaves its writer to the parent-death signal.
func TestWriterDiesWithTestBinary(t *testing.T) {
	db := filepath.Join(t.TempDir(), "state.db")
	// The helper, killed, removes nothing: it runs the writer built here
	// and keeps its ack file beside db, both removed by this process.
	bin, err := WriterBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriterSpawnHelper$")
	cmd.Env = append(os.Environ(), "HERMESTEST_SPAWN_HELPER="+db, "HERMESTEST_SPAWN_WRITER="+bin)
	cmd.Stderr = os.Stderr
	_, out := StartPiped(t, cmd)
	line := FirstLine(t, "the spawn helper", out, 60*time.Second)
	pid, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("helper said %q, want the writer's pid", line)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if s := StateOf(pid); s == 'X' || s == 'Z' {
		t.Fatalf("writer %d not running before the kill (state %c)", pid, s)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "the writer to die with the test binary", 10*time.Second, func() bool {
		s := StateOf(pid)
		return s == 'X' || s == 'Z'
	})
}

// TestWriterSpawnHelper is the test binary TestWriterDiesWithTestBinary
// kills: it starts a writer, prints its pid and waits.
func TestWriterSpawnHelper(t *testing.T) {
	db := os.Getenv("HERMESTEST_SPAWN_HELPER")
	if db == "" {
		t.Skip("helper process of TestWriterDiesWithTestBinary")
	}
	if err := CreateStore(db); err != nil {
		t.Fatal(err)
	}
	w, err := SpawnWriter(os.Getenv("HERMESTEST_SPAWN_WRITER"), WriterOptions{DB: db, Rate: 50, Ack: db + ".ack"}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(w.Pid)
	<-w.Done() // the writer runs until the parent test kills this process
}
