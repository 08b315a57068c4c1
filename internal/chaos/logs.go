package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// freezeStats is what agentd's logs say about freezes, and anything in
// them that is not a log record (a panic).
type freezeStats struct {
	all, steady []time.Duration // holder.frozen latency_ms; steady: outside restartQuiet
	problems    []string
	// slow are the steady freezes over the goal, slowest first, with the
	// incident kind that froze them ("" for a freeze outside an
	// incident: the guard's early freeze, the rewrite gate).
	slow []slowFreeze
}

// slowFreeze is one steady freeze over the goal, for the report.
type slowFreeze struct {
	d    time.Duration
	at   time.Time
	kind string
	msg  string
}

func (f slowFreeze) String() string {
	k := f.kind
	if k == "" {
		k = "no incident"
	}
	return fmt.Sprintf("%.1fms %s (%s, %s)", float64(f.d)/float64(time.Millisecond), f.at.UTC().Format("15:04:05.000"), k, f.msg)
}

// parseLogs reads agentd's JSON logs (one file per incarnation) for the
// freeze latencies it measured.
func (r *run) parseLogs() {
	files, _ := filepath.Glob(filepath.Join(r.e.logs, "agentd-*.log"))
	st := readFreezes(files)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range st.problems {
		r.problem("%s", p)
	}
	r.rep.Freezes = len(st.all)
	if len(st.all) > 0 {
		r.rep.FreezeP50 = quantile(st.all, 50)
		r.rep.FreezeP99 = quantile(st.all, 99)
		r.rep.MaxFreezeLog = st.all[len(st.all)-1]
	}
	r.rep.SlowFreezes = nil
	for i, f := range st.slow {
		if i == 5 {
			break
		}
		r.rep.SlowFreezes = append(r.rep.SlowFreezes, f.String())
	}
	r.rep.FreezesSteady = len(st.steady)
	if len(st.steady) > 0 {
		r.rep.FreezeP99Steady = quantile(st.steady, 99)
	}
}

// readFreezes reads the holder.frozen records of every file, one per
// incarnation in name order. A freeze logged within restartQuiet of a
// restarted incarnation's first record (agentd resuming incidents and
// scanning the host) is left out of steady; the first start is no
// restart. Both lists come back sorted.
func readFreezes(files []string) freezeStats {
	var st freezeStats
	kinds := map[string]string{} // incident id → kind, from incident.opened
	for i, f := range slices.Sorted(slices.Values(files)) {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		var first time.Time
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			var rec struct {
				Time      time.Time `json:"time"`
				Event     string    `json:"event"`
				LatencyMS float64   `json:"latency_ms"`
				Incident  string    `json:"incident"`
				Kind      string    `json:"kind"`
				Msg       string    `json:"msg"`
			}
			if json.Unmarshal(line, &rec) != nil {
				if strings.HasPrefix(string(line), "panic:") || strings.HasPrefix(string(line), "fatal error:") {
					st.problems = append(st.problems, fmt.Sprintf("%s: %s", filepath.Base(f), line))
				}
				continue
			}
			if first.IsZero() {
				first = rec.Time
			}
			if rec.Event == "incident.opened" && rec.Incident != "" {
				kinds[rec.Incident] = rec.Kind
			}
			if rec.Event != "holder.frozen" {
				continue
			}
			d := time.Duration(rec.LatencyMS * float64(time.Millisecond))
			st.all = append(st.all, d)
			if i == 0 || rec.Time.Sub(first) >= restartQuiet {
				st.steady = append(st.steady, d)
				if d >= goalFreezeP99 {
					st.slow = append(st.slow, slowFreeze{d: d, at: rec.Time, kind: rec.Incident, msg: rec.Msg})
				}
			}
		}
		fh.Close()
	}
	slices.Sort(st.all)
	slices.Sort(st.steady)
	for i := range st.slow {
		st.slow[i].kind = kinds[st.slow[i].kind]
	}
	slices.SortFunc(st.slow, func(a, b slowFreeze) int { return int(b.d - a.d) })
	return st
}

// quantile is the q-th percentile of sorted (nearest rank, as before).
func quantile(sorted []time.Duration, q int) time.Duration {
	return sorted[len(sorted)*q/100]
}
