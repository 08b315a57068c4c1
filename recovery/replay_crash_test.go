package recovery

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/store"
)

// TestReplayKilledMidJob kills a process with SIGKILL while its replay
// transaction is spilling into the WAL: the store then has none of the
// job's rows, or all of them, never some; and a retry completes it
// exactly once. The test binary itself is the killed process (it runs this
// test again with the helper environment set).
func TestReplayKilledMidJob(t *testing.T) {
	if db := os.Getenv("SG_CRASH_DB"); db != "" {
		_, err := ReplayFile(context.Background(), db, os.Getenv("SG_CRASH_JSONL"), ReplayOptions{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	e := newReplayEnv(t)
	// Rows of about 1 KiB: the job's dirty pages outgrow SQLite's default
	// 2 MiB page cache early, and it spills them into the WAL uncommitted.
	const n = 2500
	filler := strings.Repeat("words for the full-text index ", 32)
	lines := make([]string, n)
	for i := range lines {
		// Tool results: the trigram index skips them, which keeps this
		// test quick under -race.
		lines[i] = msg("tool", fmt.Sprintf("message %d %s %d", i, filler, i*7919), float64(1e9+i))
	}
	p := e.writeJSONL("crash.jsonl", lines...)
	e.w.Close()
	base := fileSize(e.db + "-wal")

	cmd := exec.Command(os.Args[0], "-test.run=^TestReplayKilledMidJob$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SG_CRASH_DB="+e.db, "SG_CRASH_JSONL="+p)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	killed := false
	for !killed {
		select {
		case err := <-done:
			t.Logf("the replay finished before it could be killed (%v); checking the all-rows outcome", err)
			killed = true
			continue
		default:
		}
		if fileSize(e.db+"-wal") > base+(1<<20) {
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-done
			killed = true
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the replay never spilled into the WAL")
		}
		time.Sleep(2 * time.Millisecond) // polling a file size, not synchronizing
	}

	e.open()
	var integrity string
	rows, err := e.w.QueryContext(context.Background(), "PRAGMA integrity_check")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		rows.Scan(&integrity)
	}
	rows.Close()
	if integrity != "ok" {
		t.Fatalf("integrity_check: %s", integrity)
	}
	got := len(e.rows("crash"))
	t.Logf("after SIGKILL: %d of %d rows", got, n)
	if got != 0 && got != n {
		t.Fatalf("a killed job left %d of %d rows", got, n)
	}
	if exists, _ := store.SessionExists(context.Background(), e.w, "crash"); exists != (got == n) {
		t.Fatalf("session exists=%v with %d rows", exists, got)
	}
	rep, err := Replay(context.Background(), e.w, p, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.AlreadyPresent+rep.Appended != n || len(e.rows("crash")) != n {
		t.Fatalf("retry: %+v, rows %d", rep, len(e.rows("crash")))
	}
	e.checkStore("crash")
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}
