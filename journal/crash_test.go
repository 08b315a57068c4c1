package journal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const crashHelperEnv = "STATEGUARD_TEST_JOURNAL_CRASH"

const crashIncident = "crash-1"

// TestJournalCrashHelper is not a test: with crashHelperEnv set to a
// journal path it writes steps as fast as it can, printing "ack N" after
// each commit, until it is killed.
func TestJournalCrashHelper(t *testing.T) {
	path := os.Getenv(crashHelperEnv)
	if path == "" {
		t.Skip("helper process for TestJournalCrashSafety")
	}
	ctx := context.Background()
	j, err := Open(ctx, path, nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if _, err := j.GetIncident(ctx, crashIncident); errors.Is(err, ErrIncidentNotFound) {
		_, err = j.OpenIncident(ctx, Incident{ID: crashIncident, Store: "/s", Kind: KindReplaced})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
	}
	pad := strings.Repeat("x", 3000) // several pages per commit
	for {
		// The incident's count and the step recording it commit together.
		var count int
		inc, err := j.UpdateIncident(ctx, crashIncident, Step{Name: "note"}, func(inc *Incident) error {
			if inc.Detail.Extra == nil {
				inc.Detail.Extra = map[string]any{}
			}
			c, _ := inc.Detail.Extra["count"].(float64)
			count = int(c) + 1
			inc.Detail.Extra["count"] = count
			inc.Detail.Extra["pad"] = pad
			return nil
		})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		_ = inc
		step, err := j.AddStep(ctx, crashIncident, Step{Name: "note.detail", Detail: map[string]any{"count": count, "pad": pad}})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		if _, err := j.EnqueueJob(ctx, Job{Store: "/s" + strconv.Itoa(count), Path: "/r.jsonl"}); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Printf("ack %d %d\n", step.Seq, count)
	}
}

// killHelperAfter runs the crash helper on the journal at path and kills
// it with SIGKILL after target acknowledgements; it returns the last
// acknowledged step's seq and count.
func killHelperAfter(t *testing.T, path string, target int) (lastSeq int64, lastCount int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestJournalCrashHelper$")
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acks := make(chan string)
	go func() {
		defer close(acks)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			acks <- sc.Text()
		}
	}()
	n := 0
	deadline := time.After(60 * time.Second)
read:
	for n < target {
		select {
		case line, ok := <-acks:
			if !ok {
				break read
			}
			if _, err := fmt.Sscanf(line, "ack %d %d", &lastSeq, &lastCount); err != nil {
				cmd.Process.Kill()
				t.Fatalf("helper: %q", line)
			}
			n++
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("only %d acks in 60s", n)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range acks { // the kill may race a few more acks out
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("helper ended with %v, not killed after %d acks", err, n)
	}
	return lastSeq, lastCount
}

// checkAfterCrash reopens the journal and checks it holds every
// acknowledged write and nothing half-written.
func checkAfterCrash(t *testing.T, path string, lastSeq int64, lastCount int) {
	t.Helper()
	ctx := context.Background()
	j, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	defer j.Close()
	if err := j.Check(ctx); err != nil {
		t.Fatal(err)
	}
	steps, err := j.Steps(ctx, crashIncident)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(steps)) < lastSeq {
		t.Fatalf("%d steps after the crash, but step %d was acknowledged", len(steps), lastSeq)
	}
	notes := 0
	for i, s := range steps {
		if s.Seq != int64(i+1) {
			t.Fatalf("step %d has seq %d", i, s.Seq)
		}
		if s.Name == "note" {
			notes++
		}
	}
	inc, err := j.GetIncident(ctx, crashIncident)
	if err != nil {
		t.Fatal(err)
	}
	count, _ := inc.Detail.Extra["count"].(float64)
	if int(count) != notes || int(count) < lastCount {
		t.Fatalf("incident count %v, %d note steps, %d acknowledged", count, notes, lastCount)
	}
	// A kill between an iteration's commits leaves its later writes
	// undone, so look for the acknowledged job itself.
	if last, err := j.ListJobs(ctx, JobFilter{Store: "/s" + strconv.Itoa(lastCount)}); err != nil || len(last) != 1 {
		t.Fatalf("acknowledged job %d: %+v (%v)", lastCount, last, err)
	}
	jobs, err := j.ListJobs(ctx, JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed after ack of step %d; journal holds %d steps, %d jobs", lastSeq, len(steps), len(jobs))
}

// kill -9 a process in the middle of writing steps, reopen: every step it
// saw committed is there, nothing half-written is, the journal is intact.
func TestJournalCrashSafety(t *testing.T) {
	j, path := openTestJournal(t)
	j.Close()
	for round := 1; round <= 3; round++ {
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) {
			lastSeq, lastCount := killHelperAfter(t, path, 40+17*round) // vary where the kill lands
			checkAfterCrash(t, path, lastSeq, lastCount)
		})
	}
}
