package journal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Claimers on two journal handles (two connection pools, as agentd and
// agentctl would have) never get the same job.
func TestClaimExclusiveUnderConcurrentClaimers(t *testing.T) {
	ctx := context.Background()
	j, path := openTestJournal(t)
	j2, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()

	const jobs = 120
	for i := range jobs {
		// Distinct stores: one store runs one job at a time.
		if _, err := j.EnqueueJob(ctx, Job{Store: fmt.Sprintf("/store/%d", i), Path: fmt.Sprintf("/r/%d.jsonl", i)}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().Add(time.Second)
	var mu sync.Mutex
	claimed := map[int64]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for c := range 8 {
		jj := j
		if c%2 == 1 {
			jj = j2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				job, ok, err := jj.ClaimNextJob(ctx, now)
				if err != nil {
					errs <- err
					return
				}
				if !ok {
					return
				}
				if job.State != JobRunning || job.Attempts != 1 {
					errs <- fmt.Errorf("claimed %+v", job)
					return
				}
				mu.Lock()
				claimed[job.ID]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(claimed) != jobs {
		t.Errorf("%d distinct jobs claimed, want %d", len(claimed), jobs)
	}
	for id, n := range claimed {
		if n != 1 {
			t.Errorf("job %d claimed %d times", id, n)
		}
	}
	running, _ := j.ListJobs(ctx, JobFilter{States: []JobState{JobRunning}})
	if len(running) != jobs {
		t.Errorf("%d jobs running, want %d", len(running), jobs)
	}
}

func TestClaimWaitsForStoreAndIncidents(t *testing.T) {
	ctx := context.Background()
	j, _ := openTestJournal(t)
	now := time.Now().Add(time.Second) // every job below is due by then

	inc, err := j.OpenIncident(ctx, Incident{Store: "/a", Kind: KindReplaced, State: StateCaptured})
	if err != nil {
		t.Fatal(err)
	}
	a1, _ := j.EnqueueJob(ctx, Job{IncidentID: inc.ID, Store: "/a", Path: "/r/a1.jsonl"})
	a2, _ := j.EnqueueJob(ctx, Job{IncidentID: inc.ID, Store: "/a", Path: "/r/a2.jsonl"})
	later, _ := j.EnqueueJob(ctx, Job{Store: "/b", Path: "/r/b.jsonl", NextAttemptAt: now.Add(time.Hour)})

	claim := func(at time.Time) (int64, bool) {
		t.Helper()
		job, ok, err := j.ClaimNextJob(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		return job.ID, ok
	}
	if id, ok := claim(now); ok {
		t.Fatalf("claimed job %d while its store's incident is captured, not yet diverted", id)
	}
	// The state alone is no rule: the engine's decision (LetsReplay) is.
	if err := j.Transition(ctx, inc.ID, StateDiverted, Step{Name: StepDiverted}); err != nil {
		t.Fatal(err)
	}
	if id, ok := claim(now); ok {
		t.Fatalf("claimed job %d while its store's incident still holds replay back", id)
	}
	if _, err := j.UpdateIncident(ctx, inc.ID, Step{Name: StepReplayQueued}, func(i *Incident) error {
		i.State, i.LetsReplay = StateReplaying, true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if id, ok := claim(now); !ok || id != a1.ID {
		t.Fatalf("claim once the engine let replay run = %d %v, want %d", id, ok, a1.ID)
	}
	if id, ok := claim(now); ok {
		t.Fatalf("claimed job %d while another job of the store runs", id)
	}
	if _, err := j.FinishJob(ctx, a1.ID, JobResult{Appended: 3, Skipped: 1}); err != nil {
		t.Fatal(err)
	}
	if id, ok := claim(now); !ok || id != a2.ID {
		t.Fatalf("claim after finishing = %d %v, want %d", id, ok, a2.ID)
	}
	if id, ok := claim(now); ok {
		t.Fatalf("claimed job %d before it is due", id)
	}
	if id, ok := claim(now.Add(2 * time.Hour)); !ok || id != later.ID {
		t.Fatalf("claim when due = %d %v, want %d", id, ok, later.ID)
	}
	done, _ := j.GetJob(ctx, a1.ID)
	if done.State != JobDone || done.Result == nil || done.Result.Appended != 3 || done.Result.Skipped != 1 {
		t.Errorf("finished job %+v", done)
	}
	if _, err := j.FinishJob(ctx, a1.ID, JobResult{}); !errors.Is(err, ErrJobNotRunning) {
		t.Errorf("finishing a done job = %v, want ErrJobNotRunning", err)
	}
	if _, err := j.GetJob(ctx, 9999); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("GetJob(9999) = %v", err)
	}
}

func TestBackoffDelay(t *testing.T) {
	var zero Backoff
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	for i, w := range want {
		if got := zero.Delay(i + 1); got != w {
			t.Errorf("zero Backoff.Delay(%d) = %v, want %v", i+1, got, w)
		}
	}
	if got := zero.Delay(1000); got != 5*time.Minute {
		t.Errorf("zero Backoff.Delay(1000) = %v, want the 5m cap", got)
	}
	b := Backoff{Base: time.Hour, Max: 1 << 62}
	if got := b.Delay(200); got != 1<<62 {
		t.Errorf("Delay does not cap without overflowing: %v", got)
	}
}

func TestFailJobBacksOffAndCaps(t *testing.T) {
	ctx := context.Background()
	j, _ := openTestJournal(t)
	job, err := j.EnqueueJob(ctx, Job{Store: "/s", Path: "/r/s.jsonl", SessionID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	b := Backoff{Base: time.Second, Max: 10 * time.Second, MaxAttempts: 7}
	now := time.Now().Add(time.Second)
	var delays []time.Duration
	for attempt := 1; ; attempt++ {
		got, ok, err := j.ClaimNextJob(ctx, now)
		if err != nil || !ok || got.ID != job.ID || got.Attempts != attempt {
			t.Fatalf("attempt %d: claim %+v %v %v", attempt, got, ok, err)
		}
		failed, err := j.FailJob(ctx, job.ID, now, fmt.Errorf("store busy (attempt %d)", attempt), b)
		if err != nil {
			t.Fatal(err)
		}
		if failed.State == JobFailed {
			if attempt != b.MaxAttempts {
				t.Fatalf("gave up after %d attempts, want %d", attempt, b.MaxAttempts)
			}
			break
		}
		if failed.State != JobQueued || failed.LastError != fmt.Sprintf("store busy (attempt %d)", attempt) {
			t.Fatalf("after failure: %+v", failed)
		}
		delay := failed.NextAttemptAt.Sub(now)
		delays = append(delays, delay.Round(time.Millisecond))
		// Not runnable before its time.
		if _, ok, _ := j.ClaimNextJob(ctx, now.Add(delay-time.Millisecond)); ok {
			t.Fatalf("attempt %d: claimed before the backoff elapsed", attempt)
		}
		now = failed.NextAttemptAt
	}
	want := "[1s 2s 4s 8s 10s 10s]"
	if fmt.Sprint(delays) != want {
		t.Errorf("delays %v, want %s", delays, want)
	}

	// A failure retrying cannot fix ends the job at once.
	j2, _ := j.EnqueueJob(ctx, Job{Store: "/t", Path: "/r/t.jsonl"})
	if _, ok, _ := j.ClaimNextJob(ctx, now); !ok {
		t.Fatal("no claim")
	}
	got, err := j.FailJob(ctx, j2.ID, now, fmt.Errorf("%w: file vanished", ErrNoRetry), Backoff{})
	if err != nil || got.State != JobFailed {
		t.Errorf("FailJob with ErrNoRetry: %+v %v", got, err)
	}
	if _, err := j.FailJob(ctx, j2.ID, now, errors.New("x"), Backoff{}); !errors.Is(err, ErrJobNotRunning) {
		t.Errorf("failing a failed job = %v, want ErrJobNotRunning", err)
	}
}

// A job that waits for something outside the agent (ErrNotYet) is due
// again after the base delay every time and never runs out of attempts.
func TestFailJobNotYetSpendsNoAttempt(t *testing.T) {
	ctx := context.Background()
	j, _ := openTestJournal(t)
	job, err := j.EnqueueJob(ctx, Job{Store: "/s", Path: "/r/s.jsonl", SessionID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	b := Backoff{Base: time.Second, Max: 10 * time.Second, MaxAttempts: 3}
	now := time.Now().Add(time.Second)
	for i := range 2 * b.MaxAttempts {
		got, ok, err := j.ClaimNextJob(ctx, now)
		if err != nil || !ok || got.ID != job.ID || got.Attempts != 1 {
			t.Fatalf("wait %d: claim %+v %v %v; want attempt 1 again", i, got, ok, err)
		}
		w, err := j.FailJob(ctx, job.ID, now, fmt.Errorf("%w: no schema", ErrNotYet), b)
		if err != nil || w.State != JobQueued || w.Attempts != 0 || w.NextAttemptAt.Sub(now) != b.Base {
			t.Fatalf("wait %d: %+v %v; want queued, no attempt spent, due after %v", i, w, err, b.Base)
		}
		now = w.NextAttemptAt
	}
}

func TestRequeueRunningAfterRestart(t *testing.T) {
	ctx := context.Background()
	j, path := openTestJournal(t)
	a, _ := j.EnqueueJob(ctx, Job{Store: "/a", Path: "/r/a.jsonl"})
	b, _ := j.EnqueueJob(ctx, Job{Store: "/b", Path: "/r/b.jsonl"})
	now := time.Now().Add(time.Second)
	for range 2 {
		if _, ok, err := j.ClaimNextJob(ctx, now); !ok || err != nil {
			t.Fatalf("claim: %v %v", ok, err)
		}
	}
	if _, err := j.FinishJob(ctx, b.ID, JobResult{Appended: 1}); err != nil {
		t.Fatal(err)
	}
	j.Close() // the agent stops with a still running

	j2, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	n, err := j2.RequeueRunning(ctx)
	if err != nil || n != 1 {
		t.Fatalf("RequeueRunning = %d, %v; want 1", n, err)
	}
	got, _ := j2.GetJob(ctx, a.ID)
	if got.State != JobQueued || got.LastError == "" || got.Attempts != 1 {
		t.Errorf("requeued job %+v", got)
	}
	if got, _ := j2.GetJob(ctx, b.ID); got.State != JobDone {
		t.Errorf("done job was requeued: %+v", got)
	}
	again, ok, err := j2.ClaimNextJob(ctx, time.Now().Add(time.Second))
	if err != nil || !ok || again.ID != a.ID || again.Attempts != 2 {
		t.Errorf("claim after requeue: %+v %v %v", again, ok, err)
	}
	if n, _ := j2.RequeueRunning(ctx); n != 1 {
		t.Errorf("second RequeueRunning = %d", n)
	}
}

func TestEnqueueJob(t *testing.T) {
	ctx := context.Background()
	j, _ := openTestJournal(t)
	inc, _ := j.OpenIncident(ctx, Incident{Store: "/s", Kind: KindReplaced})
	a, err := j.EnqueueJob(ctx, Job{IncidentID: inc.ID, Store: "/s", Path: "/h/sessions/s1.jsonl", SessionID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == 0 || a.State != JobQueued || a.IncidentID != inc.ID || a.CreatedAt.IsZero() || a.NextAttemptAt.IsZero() {
		t.Errorf("queued %+v", a)
	}
	dup, err := j.EnqueueJob(ctx, Job{IncidentID: inc.ID, Store: "/s", Path: "/h/sessions/s1.jsonl", SessionID: "s1"})
	if err != nil || dup.ID != a.ID {
		t.Errorf("identical queued job not coalesced: %+v %v", dup, err)
	}
	op, err := j.EnqueueJob(ctx, Job{Store: "/s", Path: "/h/sessions/s1.jsonl", SessionID: "s1"})
	if err != nil || op.ID == a.ID || op.IncidentID != "" {
		t.Errorf("operator job: %+v %v", op, err)
	}
	for _, bad := range []Job{
		{Store: "/s", Path: "relative.jsonl"},
		{Path: "/abs.jsonl"},
		{IncidentID: "no-such-incident", Store: "/s", Path: "/x.jsonl"},
	} {
		if _, err := j.EnqueueJob(ctx, bad); err == nil {
			t.Errorf("EnqueueJob(%+v) accepted", bad)
		}
	}
	list, _ := j.ListJobs(ctx, JobFilter{IncidentID: inc.ID})
	if len(list) != 1 {
		t.Errorf("jobs of incident: %+v", list)
	}
	list, _ = j.ListJobs(ctx, JobFilter{Store: "/s", States: []JobState{JobQueued, JobRunning}})
	if len(list) != 2 {
		t.Errorf("queued jobs of /s: %+v", list)
	}
}
