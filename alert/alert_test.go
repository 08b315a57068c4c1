package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// incidentDeadline is the time the incident path has to freeze holders;
// Send runs on that path, so it must return well within it.
const incidentDeadline = time.Second

// Event names the tests send; the alerter treats every name alike.
const (
	evOpened        = "incident.opened"
	evCaptured      = "capture.written"
	evCaptureFailed = "capture.failed"
	evStall         = "stall.detected"
	evReplayFailed  = "replay.failed"
)

// counter is a Counter that remembers its counts.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func newCounter() *counter { return &counter{n: map[string]int{}} }

func (c *counter) CountAlert(result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[result]++
}

func (c *counter) get(result string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[result]
}

func newTestLogger() (*slog.Logger, *hermestest.LogBuffer) {
	lb := &hermestest.LogBuffer{}
	return slog.New(slog.NewJSONHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}

func closeAlerter(t *testing.T, a *Alerter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAlertOneJSONDocumentPerEvent(t *testing.T) {
	script, out := hermestest.NewAlertRecorder(t)
	log, _ := newTestLogger()
	a := New(Config{Exec: []string{script}, Concurrency: 1, RateLimit: -1}, log)
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 891011121, time.FixedZone("x", 3600))
	sent := []Alert{
		{Event: evOpened, Level: slog.LevelError, Store: "/h/a/state.db", Time: t0,
			Fields: map[string]any{"kind": "replaced", "holders": 2, "err": errors.New("boom"), "wait": 1500 * time.Millisecond}},
		{Event: evCaptured, Level: slog.LevelInfo, Store: "/h/b/state.db", Time: t0.Add(time.Second)},
		{Event: evStall, Level: slog.LevelWarn, Store: "/h/a/state.db", Time: t0.Add(2 * time.Second),
			Fields: map[string]any{"key": "gw1", "ch": make(chan int)}},
	}
	for _, al := range sent {
		a.Send(al)
	}
	closeAlerter(t, a)

	runs := hermestest.Runs(t, out)
	if len(runs) != len(sent) {
		t.Fatalf("got %d runs, want %d: %q", len(runs), len(sent), runs)
	}
	for i, run := range runs {
		want := sent[i]
		docText, envLine, ok := strings.Cut(run, "env=")
		if !ok {
			t.Fatalf("run %d has no env line: %q", i, run)
		}
		if !strings.HasSuffix(docText, "}\n") {
			t.Errorf("run %d: document does not end with a newline: %q", i, docText)
		}
		dec := json.NewDecoder(strings.NewReader(docText))
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("run %d: %v in %q", i, err, docText)
		}
		if dec.More() {
			t.Errorf("run %d: more than one document on stdin: %q", i, docText)
		}
		if len(doc) != 5 {
			t.Errorf("run %d: keys %v, want event, level, store, time, fields", i, doc)
		}
		if doc["event"] != want.Event || doc["store"] != want.Store || doc["level"] != want.Level.String() {
			t.Errorf("run %d: %v, want %+v", i, doc, want)
		}
		ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(doc["time"]))
		if err != nil || !ts.Equal(want.Time) || ts.Location() != time.UTC {
			t.Errorf("run %d: time %v (%v), want %v in UTC", i, doc["time"], err, want.Time)
		}
		fields, ok := doc["fields"].(map[string]any)
		if !ok {
			t.Fatalf("run %d: fields %T, want an object", i, doc["fields"])
		}
		if len(fields) != len(want.Fields) {
			t.Errorf("run %d: fields %v, want %v", i, fields, want.Fields)
		}
		if wantEnv := want.Event + "|" + want.Store + "|" + want.Level.String() + "\n"; envLine != wantEnv {
			t.Errorf("run %d: env %q, want %q", i, envLine, wantEnv)
		}
		if i == 0 {
			if fields["err"] != "boom" || fields["wait"] != "1.5s" || fields["holders"] != float64(2) || fields["kind"] != "replaced" {
				t.Errorf("fields %v", fields)
			}
		}
		if i == 2 && !strings.HasPrefix(fmt.Sprint(fields["ch"]), "0x") {
			t.Errorf("an unencodable field should be written as %%v, got %v", fields["ch"])
		}
	}
	if s := a.Stats(); s.Sent != 3 || s.Failed != 0 || s.Dropped != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestAlertHangingCommandDoesNotBlockSend(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	script := hermestest.WriteScript(t, dir, "hang.sh", fmt.Sprintf("echo $$ >> %q\nexec sleep 3600\n", pids))
	log, logs := newTestLogger()
	a := New(Config{Exec: []string{script}, Concurrency: 1, Queue: 2, Timeout: time.Hour, RateLimit: -1}, log)

	a.Send(Alert{Event: evOpened, Store: "/s/0"})
	hermestest.Eventually(t, "the alert command to start", 10*time.Second, func() bool { return a.running.Load() == 1 })
	pid := readPIDs(t, pids)[0]
	for i := 1; i <= 10; i++ {
		start := time.Now()
		a.Send(Alert{Event: evOpened, Store: fmt.Sprintf("/s/%d", i), Level: slog.LevelWarn})
		if d := time.Since(start); d >= incidentDeadline {
			t.Fatalf("Send %d took %v while the alert command hangs; the incident deadline is %v", i, d, incidentDeadline)
		}
	}
	// One running, two queued, the other eight dropped.
	if s := a.Stats(); s.Dropped != 8 || s.Sent != 0 {
		t.Errorf("stats %+v, want 8 dropped", s)
	}
	if n := len(logs.Records(t, EventAlertDropped)); n != 1 {
		t.Errorf("%d %s records for one burst, want 1", n, EventAlertDropped)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := a.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a hanging command: %v, want it to give up", err)
	}
	hermestest.Eventually(t, "the hanging command to be killed", 10*time.Second, func() bool { return processGone(pid) })
	if s := a.Stats(); s.Failed != 1 || s.Dropped != 10 {
		t.Errorf("after Close: %+v, want the running one failed and the queued two dropped", s)
	}
	a.Send(Alert{Event: evOpened}) // after Close: a no-op, not a panic
}

func TestAlertTimeoutKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	// The shell forks sleep and waits: killing only the shell would leave
	// the sleep behind.
	script := hermestest.WriteScript(t, dir, "hang.sh", fmt.Sprintf("echo $$ >> %q\nsleep 3600 &\necho $! >> %q\necho waiting >&2\nwait\n", pids, pids))
	log, logs := newTestLogger()
	a := New(Config{Exec: []string{script}, Timeout: 1500 * time.Millisecond}, log)
	defer closeAlerter(t, a)

	a.Send(Alert{Event: evCaptureFailed, Store: "/s"})
	hermestest.Eventually(t, "the timed-out command to be counted failed", 20*time.Second, func() bool { return a.Stats().Failed == 1 })
	ps := readPIDs(t, pids)
	if len(ps) != 2 {
		t.Fatalf("pids %v, want shell and sleep", ps)
	}
	for _, pid := range ps {
		hermestest.Eventually(t, fmt.Sprintf("pid %d to be killed", pid), 10*time.Second, func() bool { return processGone(pid) })
	}
	recs := logs.Records(t, EventAlertFailed)
	if len(recs) != 1 {
		t.Fatalf("%d %s records, want 1", len(recs), EventAlertFailed)
	}
	r := recs[0]
	if !strings.Contains(fmt.Sprint(r["err"]), "timeout") || r["alert_event"] != evCaptureFailed ||
		r["store"] != "/s" || r["level"] != "ERROR" || !strings.Contains(fmt.Sprint(r["output"]), "waiting") {
		t.Errorf("failure record %v", r)
	}
}

func TestAlertFailureLogged(t *testing.T) {
	dir := t.TempDir()
	script := hermestest.WriteScript(t, dir, "fail.sh", "cat >/dev/null; echo 'no route to pager' >&2; exit 3\n")
	log, logs := newTestLogger()
	m := newCounter()
	a := New(Config{Exec: []string{script}, Metrics: m}, log)
	a.Send(Alert{Event: evReplayFailed, Store: "/s"})
	closeAlerter(t, a)
	recs := logs.Records(t, EventAlertFailed)
	if len(recs) != 1 || !strings.Contains(fmt.Sprint(recs[0]["output"]), "no route to pager") ||
		!strings.Contains(fmt.Sprint(recs[0]["err"]), "exit status 3") {
		t.Fatalf("failure records %v", recs)
	}
	if got := m.get("failed"); got != 1 {
		t.Errorf("%d alerts counted failed, want 1", got)
	}
}

// The window is per owner (the uid of the store's directory) and event:
// another store of the same owner is held back with the first, a store
// whose directory cannot be read counts on its own.
func TestAlertRateLimit(t *testing.T) {
	script, out := hermestest.NewAlertRecorder(t)
	log, _ := newTestLogger()
	m := newCounter()
	a := New(Config{Exec: []string{script}, Concurrency: 1, RateLimit: time.Minute, Metrics: m}, log)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	send := func(store, event string, at time.Duration) {
		a.Send(Alert{Event: event, Store: store, Time: t0.Add(at), Fields: map[string]any{"at": at.String()}})
	}
	send("/a", evOpened, 0)                  // delivered
	send("/a", evOpened, time.Second)        // suppressed
	send("/c", evOpened, 2*time.Second)      // same owner (of /): suppressed
	send("/a", evCaptured, 2*time.Second)    // other event: delivered
	send("/gone/b", evOpened, 3*time.Second) // no owner: its own window, delivered
	send("/a", evOpened, 59*time.Second)     // suppressed
	send("/a", evOpened, 61*time.Second)     // delivered, suppressed: 3
	send("/a", evOpened, 62*time.Second)     // suppressed
	send("/a", evOpened, 2*61*time.Second)   // delivered, suppressed: 1
	closeAlerter(t, a)

	type got struct {
		store, event, at string
		suppressed       any
	}
	var runs []got
	for _, run := range hermestest.Runs(t, out) {
		docText, _, _ := strings.Cut(run, "env=")
		var doc struct {
			Event, Store string
			Fields       map[string]any
		}
		if err := json.Unmarshal([]byte(docText), &doc); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, got{doc.Store, doc.Event, fmt.Sprint(doc.Fields["at"]), doc.Fields["suppressed"]})
	}
	want := []got{
		{"/a", evOpened, "0s", nil},
		{"/a", evCaptured, "2s", nil},
		{"/gone/b", evOpened, "3s", nil},
		{"/a", evOpened, "1m1s", float64(3)},
		{"/a", evOpened, "2m2s", float64(1)},
	}
	if fmt.Sprint(runs) != fmt.Sprint(want) {
		t.Errorf("delivered\n%v\nwant\n%v", runs, want)
	}
	if s := a.Stats(); s.Sent != 5 || s.Suppressed != 4 {
		t.Errorf("stats %+v, want 5 sent 4 suppressed", s)
	}
	if v := m.get("suppressed"); v != 4 {
		t.Errorf("%d alerts counted suppressed", v)
	}
	if v := m.get("sent"); v != 5 {
		t.Errorf("%d alerts counted sent", v)
	}
}

func TestAlertConcurrencyBound(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "running"), []byte("0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Each run bumps a shared counter under a mkdir lock, records the
	// count it saw, and holds its slot until the test releases it.
	script := hermestest.WriteScript(t, dir, "slot.sh", fmt.Sprintf(`d=%q
lock() { until mkdir "$d/lock" 2>/dev/null; do :; done; }
unlock() { rmdir "$d/lock"; }
lock; n=$(( $(cat "$d/running") + 1 )); echo $n > "$d/running"; echo $n >> "$d/peaks"; unlock
cat > /dev/null
until [ -e "$d/release" ]; do sleep 0.01; done
lock; n=$(( $(cat "$d/running") - 1 )); echo $n > "$d/running"; unlock
`, dir))
	log, _ := newTestLogger()
	a := New(Config{Exec: []string{script}, Concurrency: 2, RateLimit: -1}, log)
	const n = 6
	for i := range n {
		a.Send(Alert{Event: evOpened, Store: fmt.Sprintf("/s/%d", i)})
	}
	peaks := func() []int { return readInts(t, filepath.Join(dir, "peaks")) }
	hermestest.Eventually(t, "two commands to hold their slots", 10*time.Second, func() bool { return len(peaks()) >= 2 })
	if r, q := a.running.Load(), len(a.queue); r != 2 || q != n-2 {
		t.Errorf("with both slots held: %d running, %d queued; want 2 and %d", r, q, n-2)
	}
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	closeAlerter(t, a)
	p := peaks()
	if len(p) != n {
		t.Fatalf("%d runs recorded, want %d", len(p), n)
	}
	for _, c := range p {
		if c > 2 {
			t.Errorf("%d commands ran at once, the bound is 2 (peaks %v)", c, p)
		}
	}
	if s := a.Stats(); s.Sent != n {
		t.Errorf("stats %+v", s)
	}
}

func TestAlertDisabled(t *testing.T) {
	var nilAlerter *Alerter
	nilAlerter.Send(Alert{Event: "x"})
	if err := nilAlerter.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := New(Config{}, nil)
	a.Send(Alert{Event: "x"})
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s != (AlertStats{}) {
		t.Errorf("a disabled alerter counted %+v", s)
	}
}

func readInts(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, n)
	}
	return out
}

func readPIDs(t *testing.T, path string) []int {
	t.Helper()
	var ps []int
	hermestest.Eventually(t, "pids in "+path, 10*time.Second, func() bool { ps = readInts(t, path); return len(ps) > 0 })
	return ps
}

// processGone reports whether pid no longer runs. An orphan the container's
// init has not reaped yet is a zombie, dead for our purpose.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	if runtime.GOOS == "linux" {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return true
		}
	}
	return false
}
