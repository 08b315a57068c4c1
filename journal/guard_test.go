package journal

import (
	"context"
	"testing"
	"time"
)

func TestGuardPausesExpireByTime(t *testing.T) {
	ctx := context.Background()
	j, _ := openTestJournal(t)
	now := time.Now()

	p, err := j.PauseGuard(ctx, "/a", now.Add(15*time.Minute), "vacuum")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Active(now) || p.Active(now.Add(16*time.Minute)) {
		t.Errorf("pause %+v: Active wrong", p)
	}
	if _, err := j.PauseGuard(ctx, "/b", now.Add(time.Hour), "journal_mode=DELETE"); err != nil {
		t.Fatal(err)
	}
	active := func(at time.Time) []string {
		t.Helper()
		ps, err := j.ActivePauses(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, p := range ps {
			s = append(s, p.Store)
		}
		return s
	}
	if got := active(now); len(got) != 2 {
		t.Errorf("active now: %v", got)
	}
	if got := active(now.Add(30 * time.Minute)); len(got) != 1 || got[0] != "/b" {
		t.Errorf("active after /a expired: %v", got)
	}
	if got := active(now.Add(2 * time.Hour)); len(got) != 0 {
		t.Errorf("active after both expired: %v", got)
	}

	// A new pause supersedes the old one.
	p2, err := j.PauseGuard(ctx, "/a", now.Add(5*time.Minute), "shorter")
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := j.ActivePauses(ctx, now)
	if len(ps) != 2 || ps[0].ID != p2.ID || ps[0].Reason != "shorter" {
		t.Errorf("after superseding: %+v", ps)
	}

	resumed, err := j.ResumeGuard(ctx, "/a")
	if err != nil || !resumed {
		t.Errorf("ResumeGuard = %v, %v", resumed, err)
	}
	if got := active(now); len(got) != 1 || got[0] != "/b" {
		t.Errorf("active after resume: %v", got)
	}
	if resumed, _ := j.ResumeGuard(ctx, "/a"); resumed {
		t.Error("second ResumeGuard reported a pause")
	}
	if _, err := j.PauseGuard(ctx, "/c", now.Add(-time.Minute), "past"); err == nil {
		t.Error("pause ending in the past accepted")
	}

	var n int
	if err := j.db.QueryRowContext(ctx, "SELECT count(*) FROM guard_pauses WHERE store = '/a' AND ended_at IS NOT NULL").Scan(&n); err != nil || n != 2 {
		t.Errorf("history of /a: %d ended pauses (%v), want 2", n, err)
	}
}
