package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// TestCheckProfileToolWindow: a tool (cp over the main) ran from t=10 to
// t=12 with a backup taken at t=8. Rows stamped while it ran are counted
// apart; a missing one is lost silently unless an incident saw the tool.
func TestCheckProfileToolWindow(t *testing.T) {
	for _, noticed := range []bool{false, true} {
		t.Run(fmt.Sprintf("noticed=%t", noticed), func(t *testing.T) {
			f := newFixture(t)
			f.toolRestore(8, 10, 12, map[int64]float64{1: 1})
			f.acked(1, 1, 1.01, 1)    // in the backup and the store
			f.acked(2, 9, 9.01, 0)    // after the backup, before the tool: rolled back
			f.acked(3, 10.5, 10.6, 1) // while the tool ran, kept
			f.acked(4, 11, 11.1, 0)   // while the tool ran, missing
			f.acked(5, 12.5, 12.6, 1) // after the tool: required, there
			pr := f.checkWith(judge{
				settled: func(time.Time) bool { return true },
				failed:  func(*writerSlot, time.Time) bool { return false },
				noticed: func(restore) bool { return noticed },
			})
			wantMissing, wantLost := 0, 1
			if noticed {
				wantMissing, wantLost = 1, 0
			}
			if pr.DuringTool != 2 || pr.DuringMissing != wantMissing || pr.DuringLost != wantLost {
				t.Errorf("during the tool %d, missing %d, lost %d; want 2, %d, %d", pr.DuringTool, pr.DuringMissing, pr.DuringLost,
					wantMissing, wantLost)
			}
			if pr.Required != 1 || pr.Lost != 0 || pr.RolledBack != 1 || pr.LostEarlier != 0 {
				t.Errorf("required %d lost %d rolled back %d lost earlier %d; want 1 0 1 0", pr.Required, pr.Lost, pr.RolledBack, pr.LostEarlier)
			}
		})
	}
}

// TestCheckProfileReplayedBack pins down which rows are "rolled back on
// purpose, then replayed back" around a restore at t=10 of a backup taken
// at t=8: only rows committed (acknowledged) after the backup began and
// before the restore began, that a replay wrote (their recovery id says
// so). A row acknowledged after the restore began may have been committed
// into the orphan after the replacement, which a replay must keep; a row
// no replay wrote was never rolled back (an in-place copy under a live
// WAL). Blaming either on the replay cut would be the harness's mistake.
func TestCheckProfileReplayedBack(t *testing.T) {
	f := newFixture(t)
	f.backup(8, 10, map[int64]float64{1: 1})
	f.acked(1, 1, 1.01, 1)      // in the backup
	f.acked(2, 7.5, 7.6, 1)     // acked before the backup, which lacks it: put back, as it should be
	f.replayedBack(3, 9.5, 9.6) // acked between backup and restore, back in the store by a replay: replayed back
	f.acked(4, 9.95, 10.05, 1)  // stamped before the restore, acked after it began: kept
	f.acked(5, 9.97, 10.1, 0)   // the same, rolled back
	f.acked(6, 9.6, 9.7, 1)     // acked between backup and restore, there, but no replay wrote it: never rolled back
	pr := f.check(true)
	if pr.Resurrected != 1 || pr.StraddleKept != 1 || pr.AckedAfterRolledBack != 1 || pr.NotRolledBack != 1 {
		t.Errorf("replayed back %d, straddling kept %d, acked after and rolled back %d, not rolled back %d; want 1, 1, 1, 1",
			pr.Resurrected, pr.StraddleKept, pr.AckedAfterRolledBack, pr.NotRolledBack)
	}
	if pr.Lost != 0 || pr.LostEarlier != 0 || pr.Duplicated != 0 {
		t.Errorf("lost %d, lost earlier %d, duplicated %d; want none", pr.Lost, pr.LostEarlier, pr.Duplicated)
	}
}

// TestCheckProfileToolThenRestore: rows stamped while a tool ran (t=10 to
// 11) and missing at the end, with a later restore at t=20 of a backup
// taken at t=15. A row acknowledged after that backup began was rolled
// back by the later restore (allowed); one acknowledged before it must
// be in that backup, else the tool lost it.
func TestCheckProfileToolThenRestore(t *testing.T) {
	f := newFixture(t)
	f.toolRestore(8, 10, 11, nil)
	f.toolRestore(15, 20, 20, map[int64]float64{2: 10.4})
	f.acked(1, 10.2, 15.5, 0) // acked after the second backup began: the second restore rolled it back
	f.acked(2, 10.4, 10.5, 0) // acked before it, in it: survived the tool, rolled back later
	f.acked(3, 10.6, 10.7, 0) // acked before it, not in it: lost by the tool
	pr := f.check(true)
	if pr.DuringTool != 3 || pr.DuringLost != 1 || pr.RolledBack != 2 {
		t.Errorf("during %d, lost with no incident %d, rolled back %d; want 3, 1, 2", pr.DuringTool, pr.DuringLost, pr.RolledBack)
	}
	if len(pr.DuringLostSamples) != 1 || !strings.Contains(pr.DuringLostSamples[0], "seq 3 ") {
		t.Errorf("samples %q, want seq 3", pr.DuringLostSamples)
	}
}

// TestLeftovers lists what the final check calls left behind in a
// profile directory, and what it allows.
func TestLeftovers(t *testing.T) {
	dir := t.TempDir()
	p := &profile{name: "default", dir: dir, db: filepath.Join(dir, "state.db")}
	p.addOperatorFile("state.db.old")
	files := []string{"state.db", "state.db-wal", "state.db-shm", "state.db.old",
		"state.db.snapshot-20261201T100000Z-ab12", "state.db-wal.quarantined", "state.db.pre-restore-20261201-100000"}
	dirs := []string{"sessions", "profiles", "state.db.retired-wal-20261201-100000-42", "state.db.retired-wal-20261201-100001-43.partial"}
	for _, n := range files {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range dirs {
		if err := os.Mkdir(filepath.Join(dir, n), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	got := leftovers(p)
	want := []string{"state.db-wal.quarantined", "state.db.pre-restore-20261201-100000",
		"state.db.retired-wal-20261201-100001-43.partial", "state.db.snapshot-20261201T100000Z-ab12"}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("leftovers\n got %q\nwant %q", got, want)
	}
	// profiles/ belongs to the home only.
	named := &profile{name: "p1", dir: dir, db: filepath.Join(dir, "state.db")}
	if got := leftovers(named); !slices.Contains(got, "profiles") || !slices.Contains(got, "state.db.old") {
		t.Errorf("named profile's leftovers %q: want profiles/ and another profile's operator file counted", got)
	}
}

// TestReadFreezes: freezes in the first seconds of a restarted agentd are
// left out of the steady p99, not those of its first start.
func TestReadFreezes(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	rec := func(at time.Duration, event string, ms float64) string {
		return fmt.Sprintf(`{"time":%q,"level":"WARN","msg":"m","event":%q,"latency_ms":%g}`+"\n",
			t0.Add(at).Format(time.RFC3339Nano), event, ms)
	}
	opened := fmt.Sprintf(`{"time":%q,"level":"WARN","msg":"m","event":"incident.opened","incident":"i1","kind":"rewritten"}`+"\n",
		t0.Add(3*time.Second).Format(time.RFC3339Nano))
	slow := fmt.Sprintf(`{"time":%q,"level":"WARN","msg":"holder frozen","event":"holder.frozen","incident":"i1","latency_ms":70}`+"\n",
		t0.Add(3*time.Second).Format(time.RFC3339Nano))
	first := rec(0, "agent.started", 0) + rec(time.Second, "holder.frozen", 1) + rec(2*time.Second, "holder.frozen", 2) + opened + slow
	second := rec(time.Minute, "agent.started", 0) + rec(time.Minute+time.Second, "holder.frozen", 900) +
		"panic: boom\n" + rec(time.Minute+restartQuiet+time.Second, "holder.frozen", 3)
	if err := os.WriteFile(filepath.Join(dir, "agentd-001.log"), []byte(first), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agentd-002.log"), []byte(second), 0o600); err != nil {
		t.Fatal(err)
	}
	st := readFreezes([]string{filepath.Join(dir, "agentd-002.log"), filepath.Join(dir, "agentd-001.log")})
	ms := func(l []time.Duration) []float64 {
		var out []float64
		for _, d := range l {
			out = append(out, float64(d)/float64(time.Millisecond))
		}
		return out
	}
	if got := ms(st.all); !slices.Equal(got, []float64{1, 2, 3, 70, 900}) {
		t.Errorf("all freezes %v", got)
	}
	if got := ms(st.steady); !slices.Equal(got, []float64{1, 2, 3, 70}) {
		t.Errorf("steady freezes %v, want the restart's 900 ms left out", got)
	}
	if len(st.slow) != 1 || st.slow[0].kind != "rewritten" || !strings.HasPrefix(st.slow[0].String(), "70.0ms ") {
		t.Errorf("slow freezes %v, want the 70 ms one of the rewritten incident", st.slow)
	}
	if len(st.problems) != 1 || !strings.Contains(st.problems[0], "panic: boom") {
		t.Errorf("problems %q, want the panic", st.problems)
	}
}

// TestIncidentAround: an incident counts as having seen a tool when it
// was opened from a second before the tool to a few seconds after agentd
// was next up.
func TestIncidentAround(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	incs := []apiIncident{{Store: "/h/state.db", OpenedAt: t0.Add(2 * time.Second)}, {Store: "/h/other.db", OpenedAt: t0}}
	cases := []struct {
		from, to time.Duration
		want     bool
	}{
		{0, time.Second, true},                    // opened a second after the tool
		{3 * time.Second, 4 * time.Second, true},  // opened a second before the tool started
		{5 * time.Second, 6 * time.Second, false}, // an earlier incident
		{-10 * time.Second, -2 * time.Second, false},
	}
	for _, c := range cases {
		if got := incidentAround(incs, "/h/state.db", t0.Add(c.from), t0.Add(c.to)); got != c.want {
			t.Errorf("tool %v..%v: noticed %t, want %t", c.from, c.to, got, c.want)
		}
	}
}

// TestUpAfter: the time agentd was next up after a moment.
func TestUpAfter(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	a := &agentProc{ups: []upInterval{{from: t0, to: t0.Add(10 * time.Second)}, {from: t0.Add(13 * time.Second)}}}
	for _, c := range []struct{ at, want time.Duration }{{5 * time.Second, 5 * time.Second},
		{11 * time.Second, 13 * time.Second}, {20 * time.Second, 20 * time.Second}} {
		if got := a.upAfter(t0.Add(c.at)); !got.Equal(t0.Add(c.want)) {
			t.Errorf("upAfter(+%v) = +%v, want +%v", c.at, got.Sub(t0), c.want)
		}
	}
}

// TestCheckProfileSqlite3Restore: `sqlite3 .restore` ran from t=10 to
// t=12 with a backup taken at t=8. Rows stamped while it ran and missing
// were committed before its backup API took the write lock, and rolled
// back with everything else since the backup, as long as the session's
// missing rows all precede its surviving ones: a row missing after one
// that survived (committed after the lock) is lost, and no other tool
// gets the benefit.
func TestCheckProfileSqlite3Restore(t *testing.T) {
	for _, kind := range []string{FaultSqlite3Restore, FaultCpInplace} {
		t.Run(kind, func(t *testing.T) {
			f := newFixture(t)
			f.toolRestore(8, 10, 12, map[int64]float64{1: 1})
			f.p.restores[len(f.p.restores)-1].Kind = kind
			f.acked(1, 1, 1.01, 1)    // in the backup and the store
			f.acked(2, 9, 9.01, 0)    // after the backup, before the tool: rolled back
			f.acked(3, 10.5, 10.6, 0) // while the tool ran, committed before its write lock
			f.acked(4, 11, 11.1, 0)   // the same
			f.acked(5, 11.5, 11.6, 1) // committed after the lock: survived
			f.acked(6, 11.8, 11.9, 0) // after a survivor: lost
			f.acked(7, 12.5, 12.6, 1) // after the tool: required, there
			pr := f.check(true)
			wantRolled, wantLost := 2, 1
			if kind != FaultSqlite3Restore {
				wantRolled, wantLost = 0, 3
			}
			if pr.DuringTool != 4 || pr.DuringRolledBack != wantRolled || pr.DuringLost != wantLost || pr.DuringMissing != 0 {
				t.Errorf("during %d, rolled back by the restore %d, lost %d, missing with an incident %d; want 4, %d, %d, 0",
					pr.DuringTool, pr.DuringRolledBack, pr.DuringLost, pr.DuringMissing, wantRolled, wantLost)
			}
			if kind == FaultSqlite3Restore && (len(pr.DuringLostSamples) != 1 || !strings.Contains(pr.DuringLostSamples[0], "seq 6 ")) {
				t.Errorf("lost samples %q, want seq 6", pr.DuringLostSamples)
			}
			if pr.Required != 1 || pr.Lost != 0 {
				t.Errorf("required %d lost %d; want 1, 0", pr.Required, pr.Lost)
			}
		})
	}
}

// TestCheckProfileOrphanOfEarlierReplacement: restore 1 renamed a backup
// over the store at t=5 while agentd was down, so its orphan's writer went
// on committing into the old generation (row 2, at 8.5) until agentd came
// back at t=9 and froze it; restore 2 (backup at 8, rename at 10) then
// replaced the store, whose backup naturally lacks row 2: it never was in
// that generation. Incident 1's divert replays row 2, as it must
// (committed after its replacement). Only rows a divert of an incident
// opened after restore 2 began replayed are rolled back on purpose and
// replayed back: rows 3 and 4 (row 4 is in both diverts, incident 1's
// first), whatever the time the divert claims for its replacement.
// Loaded chaos runs (seed 1, 80 cycles) counted rows like row 2 as
// replayed back ("replaced: timestamps (no wal position was recorded)",
// incidents found at agentd's start after a kill); before this test
// every one of rows 2-4 was.
func TestCheckProfileOrphanOfEarlierReplacement(t *testing.T) {
	f := newFixture(t)
	f.backup(2, 5, map[int64]float64{1: 1})
	f.backup(8, 10, map[int64]float64{1: 1})
	f.acked(1, 1, 1.01, 1)
	f.replayedBack(2, 8.4, 8.5)
	f.replayedBack(3, 9.0, 9.1)
	f.replayedBack(4, 9.2, 9.3)
	opened := map[string]float64{"20270115T080009Z-aaaaaa": 9, "20270115T080010Z-bbbbbb": 10.01, "20270115T080010Z-cccccc": 10.05}
	f.divert("20270115T080009Z-aaaaaa", "replaced", "timestamps: no wal position was recorded", 2, 4)
	f.divert("20270115T080010Z-bbbbbb", "replaced", "wal frame 12 of 0badf00d-0badf00d", 3)
	f.divert("20270115T080010Z-cccccc", "mispaired", "timestamps: no wal position was recorded", 4)
	pr := f.checkWith(judge{
		settled: func(time.Time) bool { return true },
		failed:  func(*writerSlot, time.Time) bool { return false },
		noticed: func(restore) bool { return false },
		opened: func(id string) (time.Time, bool) {
			sec, ok := opened[id]
			return f.at(sec), ok
		},
	})
	if pr.Resurrected != 2 || pr.OrphanReplayed != 1 {
		t.Fatalf("replayed back %d (%v), of an earlier orphan %d; want 2, 1", pr.Resurrected, pr.ResurrectedBy, pr.OrphanReplayed)
	}
	want := map[string]int{"replaced: frame cut": 1, "mispaired: timestamps (no wal position was recorded)": 1}
	if fmt.Sprint(pr.ResurrectedBy) != fmt.Sprint(want) {
		t.Errorf("replayed back by %v; want %v", pr.ResurrectedBy, want)
	}
	if pr.Lost != 0 || pr.LostEarlier != 0 || pr.NotRolledBack != 0 {
		t.Errorf("lost %d, lost earlier %d, not rolled back %d; want none", pr.Lost, pr.LostEarlier, pr.NotRolledBack)
	}
	// Without the run's incident record every divert is the restore's own.
	if pr := f.check(true); pr.Resurrected != 3 || pr.OrphanReplayed != 0 {
		t.Errorf("no incidents read: replayed back %d, of an earlier orphan %d; want 3, 0", pr.Resurrected, pr.OrphanReplayed)
	}
}

// divert writes the agent's divert of incident id whose replayed file
// holds seqs (stamped as TestCheckProfileOrphanOfEarlierReplacement acks
// them).
func (f *fixture) divert(id, kind, cut string, seqs ...int64) {
	f.t.Helper()
	dir := filepath.Join(f.p.dir, "sessions", "recovered", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		f.t.Fatal(err)
	}
	var lines strings.Builder
	for _, seq := range seqs {
		sec := map[int64]float64{2: 8.4, 3: 9.0, 4: 9.2}[seq]
		fmt.Fprintf(&lines, `{"role":"user","content":%q,"timestamp":%s}`+"\n", hermestest.MessageContent("s", seq),
			strconv.FormatFloat(float64(f.at(sec).UnixNano())/1e9, 'f', -1, 64))
	}
	if err := os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(lines.String()), 0o600); err != nil {
		f.t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{"incident_id": id, "kind": kind, "cut": cut,
		"files": []map[string]any{{"session_id": "s", "file": "s.jsonl", "pre_replacement": false}}})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "divert.json"), b, 0o600); err != nil {
		f.t.Fatal(err)
	}
}
