package main

import (
	"fmt"
	"time"
)

// Issue 18's goals for a chaos run, printed with every table; they fail
// the run only with -goals (Config.Goals).
const (
	goalFreezeP99          = 50 * time.Millisecond // agent log, outside restartQuiet
	goalResolution         = 60 * time.Second      // except incidents that said the disk was full
	goalResurrectedPer1000 = 10                    // rolled-back rows replayed back per 1000 cycles
	// restartQuiet is how long after an agentd start its freezes are
	// left out of FreezeP99Steady: the resume and first full scan of a
	// restarted agent are not the steady freeze path.
	restartQuiet = 5 * time.Second
)

// cyclesRun is how many faults were injected.
func (r *Report) cyclesRun() int {
	n := 0
	for _, c := range r.Faults {
		n += c
	}
	return n
}

// resurrectedPer1000 scales Resurrected to a 1000-cycle run.
func (r *Report) resurrectedPer1000() float64 {
	c := r.cyclesRun()
	if c == 0 {
		return 0
	}
	return float64(r.Resurrected) * 1000 / float64(c)
}

// GoalsMissed lists the goals this run did not meet.
func (r *Report) GoalsMissed() []string {
	var out []string
	if r.FreezesSteady > 0 && r.FreezeP99Steady >= goalFreezeP99 {
		out = append(out, fmt.Sprintf("freeze p99 %s (goal < %s)", msText(r.FreezeP99Steady), msText(goalFreezeP99)))
	}
	if r.MaxResolutionSteady >= goalResolution {
		out = append(out, fmt.Sprintf("max time to resolution %s (goal < %s unless the disk was full)",
			r.MaxResolutionSteady.Round(time.Millisecond), secText(goalResolution)))
	}
	if r.resurrectedPer1000() > goalResurrectedPer1000 {
		out = append(out, fmt.Sprintf("%d rolled-back rows replayed back, %.1f per 1000 cycles (goal ≤ %d)",
			r.Resurrected, r.resurrectedPer1000(), goalResurrectedPer1000))
	}
	return out
}

// goalMark is "met" or "MISSED".
func goalMark(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}
