package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// replayedRow is a row acknowledged after restore's backup began and
// before the restore began, missing from the backup and in the store by a
// replay: a candidate for "rolled back on purpose, then replayed back".
type replayedRow struct {
	key   rowKey
	start time.Time // the restore's start
}

// divertHolder is one divert whose replayed (not pre-replacement) files
// hold a row.
type divertHolder struct {
	incident string
	src      string // "kind: rule"
	// opened is when its incident opened, for a replaced or mispaired
	// store whose opening the run knows; zero otherwise.
	opened time.Time
}

// replaySources sorts the candidate rows by the divert that replayed them.
// The agent's diverted JSONL under the profile's
// sessions/recovered/<incident>/ holds every row it replays, next to
// divert.json naming the incident's kind and the rule that split its rows
// (the frame cut, the timestamps and why).
//
// A row that only diverts of incidents opened BEFORE its restore began
// replayed is no row that restore rolled back: those incidents are of an
// earlier replacement, whose orphan the row was committed into after it
// (its holders not frozen yet: agentd was down when the main was renamed
// over). It never was in the generation the later restore replaced, whose
// backup lacks it for that reason; replaying it is the earlier incident's
// job. It is counted apart (orphan), not as replayed back. The opening
// time is the run's own record (the control API), not the divert's
// replacement time: a wrong replacement time is the very bug the count
// exists to show. The other rows are counted by "kind: rule" of the first
// divert (by incident id, which starts with its time) not opened before
// their restore, for issue 18's goal of ≤ 10 per 1000 cycles; samples
// names a few with their divert.
func replaySources(profileDir string, rows []replayedRow, opened func(id string) (time.Time, bool)) (by map[string]int, orphan int, samples []string) {
	if len(rows) == 0 {
		return nil, 0, nil
	}
	held := divertsHolding(profileDir, opened)
	by = map[string]int{}
	for _, r := range rows {
		hs := held[stampOf{r.key.session, r.key.ts}]
		own := -1
		for i, h := range hs {
			if h.opened.IsZero() || !h.opened.Before(r.start) {
				own = i
				break
			}
		}
		switch {
		case len(hs) == 0:
			by["no divert file holds it (a replay by hand, or Hermes' own import)"]++
		case own < 0:
			orphan++
		default:
			by[hs[own].src]++
			if len(samples) < 5 {
				samples = append(samples, fmt.Sprintf("%s ts %.6f by %s (%s)", r.key.session, r.key.ts, hs[own].incident, hs[own].src))
			}
		}
	}
	return by, orphan, samples
}

type stampOf struct {
	session string
	ts      float64
}

// divertsHolding reads every divert of the profile: for each replayed
// row's session and stamp, the diverts that replay it, in incident order.
func divertsHolding(profileDir string, opened func(id string) (time.Time, bool)) map[stampOf][]divertHolder {
	out := map[stampOf][]divertHolder{}
	dirs, _ := filepath.Glob(filepath.Join(profileDir, "sessions", "recovered", "*", "divert.json"))
	sort.Strings(dirs)
	for _, mf := range dirs {
		var m struct {
			Incident string `json:"incident_id"`
			Kind     string `json:"kind"`
			Cut      string `json:"cut"`
			Files    []struct {
				Session string `json:"session_id"`
				File    string `json:"file"`
				Pre     bool   `json:"pre_replacement"`
			} `json:"files"`
		}
		b, err := os.ReadFile(mf)
		if err != nil || json.Unmarshal(b, &m) != nil {
			continue
		}
		h := divertHolder{incident: m.Incident, src: m.Kind + ": " + cutRule(m.Kind, m.Cut)}
		if (m.Kind == "replaced" || m.Kind == "mispaired") && opened != nil {
			if t, ok := opened(m.Incident); ok {
				h.opened = t
			}
		}
		for _, f := range m.Files {
			if f.Pre {
				continue
			}
			for _, ts := range jsonlStamps(filepath.Join(filepath.Dir(mf), f.File)) {
				a := stampOf{f.Session, ts}
				out[a] = append(out[a], h)
			}
		}
	}
	return out
}

// cutRule shortens a divert's cut note to the rule's name.
func cutRule(kind, note string) string {
	switch {
	case strings.HasPrefix(note, "wal frame"):
		return "frame cut"
	case strings.HasPrefix(note, "timestamps: "):
		return "timestamps (" + strings.TrimPrefix(note, "timestamps: ") + ")"
	case note != "":
		return note
	case kind == "sidecar_lost":
		return "no cut (every orphan row)"
	}
	return "timestamps"
}

// jsonlStamps reads the timestamp of every line of a diverted JSONL file.
func jsonlStamps(path string) []float64 {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []float64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l struct {
			Timestamp *float64 `json:"timestamp"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Timestamp != nil {
			out = append(out, *l.Timestamp)
		}
	}
	return out
}

// sourcesString is "kind: rule N, ..." by count, most first.
func sourcesString(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	type kv struct {
		k string
		n int
	}
	var l []kv
	for k, n := range m {
		l = append(l, kv{k, n})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].n > l[j].n || l[i].n == l[j].n && l[i].k < l[j].k })
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = fmt.Sprintf("%s %d", e.k, e.n)
	}
	return strings.Join(parts, "; ")
}
