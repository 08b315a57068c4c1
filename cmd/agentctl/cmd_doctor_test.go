package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/supervisor"
)

// doctorFixture is a host in a temp dir: one Hermes home with the default
// profile and a named one (real stores), a passwd file, /proc and sysctl
// files with healthy values, a config and a state directory.
type doctorFixture struct {
	base, home, stateDir, cfgPath string
	in                            doctorInput
}

const fullCaps = "000001ffffffffff"

func newDoctorFixture(t *testing.T) *doctorFixture {
	t.Helper()
	base := t.TempDir()
	f := &doctorFixture{base: base, home: filepath.Join(base, "home", ".hermes"), stateDir: filepath.Join(base, "state")}
	for _, p := range []string{filepath.Join(f.home, "state.db"), filepath.Join(f.home, "profiles", "work", "state.db")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := hermestest.CreateStore(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := control.PrepareStateDir(f.stateDir); err != nil {
		t.Fatal(err)
	}
	f.cfgPath = filepath.Join(base, "agent.toml")
	f.write(t, "agent.toml", fmt.Sprintf("state_dir = %q\nsocket = %q\n", f.stateDir, filepath.Join(base, "run", "agent.sock")))
	f.write(t, "proc/status", "Name:\tagentd\nUid:\t0\t0\t0\t0\nCapEff:\t"+fullCaps+"\n")
	f.write(t, "proc/mountinfo", "22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n")
	f.write(t, "proc/locks", "1: POSIX  ADVISORY  READ 10662 fe:00:10023009 1073741826 1073742335\n")
	f.write(t, "sys/max_user_watches", "524288\n")
	f.write(t, "sys/max_user_instances", "128\n")
	f.write(t, "passwd", "")
	unit := f.write(t, "units/stateguard-agentd.service", "[Service]\n")
	env := map[string]string{"HOME": filepath.Join(base, "nohome")}
	f.in = doctorInput{
		goos: "linux", euid: os.Geteuid(),
		getenv:       func(k string) string { return env[k] },
		configPath:   f.cfgPath,
		procStatus:   filepath.Join(base, "proc/status"),
		mountinfo:    filepath.Join(base, "proc/mountinfo"),
		locks:        filepath.Join(base, "proc/locks"),
		maxWatches:   filepath.Join(base, "sys/max_user_watches"),
		maxInstances: filepath.Join(base, "sys/max_user_instances"),
		discover: store.DiscoverOptions{
			ExtraHomes: []string{f.home}, UserHome: filepath.Join(base, "nohome"),
			PasswdPath: filepath.Join(base, "passwd"), Getenv: func(string) string { return "" },
		},
		unitPaths: []string{unit},
		unitDirs:  []string{filepath.Join(base, "units")},
		now:       time.Now(),
		timeout:   2 * time.Second,
	}
	return f
}

func (f *doctorFixture) write(t *testing.T, rel, data string) string {
	t.Helper()
	p := filepath.Join(f.base, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *doctorFixture) run(t *testing.T) map[string]checkResult {
	t.Helper()
	checks := runDoctor(context.Background(), f.in)
	out := map[string]checkResult{}
	for _, c := range checks {
		if _, dup := out[c.Name]; dup {
			t.Fatalf("check %q reported twice", c.Name)
		}
		if c.Status != statusOK && c.Fix == "" {
			t.Errorf("%s is %s without a fix: %s", c.Name, c.Status, c.Summary)
		}
		out[c.Name] = c
	}
	return out
}

func expectStatus(t *testing.T, got map[string]checkResult, name string, want checkStatus, mention string) {
	t.Helper()
	c, ok := got[name]
	if !ok {
		t.Fatalf("no %q check", name)
	}
	text := c.Summary + " " + strings.Join(c.Details, " ")
	if c.Status != want || !strings.Contains(text, mention) {
		t.Errorf("%s = %s %q %q; want %s mentioning %q", name, c.Status, c.Summary, c.Details, want, mention)
	}
}

// TestDoctorHealthy is the baseline every planted problem is measured
// against: on the healthy fixture nothing fails.
func TestDoctorHealthy(t *testing.T) {
	f := newDoctorFixture(t)
	got := f.run(t)
	for _, name := range []string{"config", "privileges", "proc hidepid", "holder verdict", "inotify", "sqlite", "service", "writable", "state dir", "stores", "captures", "replay jobs", "guard"} {
		expectStatus(t, got, name, statusOK, "")
	}
	// The daemon is not running: a warning, not a failure.
	expectStatus(t, got, "daemon", statusWarn, "not running")
	expectStatus(t, got, "stores", statusOK, "2 stores")
	expectStatus(t, got, "guard", statusOK, "journal_mode=DELETE")
	expectStatus(t, got, "guard", statusOK, "agentctl guard off")
	if needsAction(runDoctor(context.Background(), f.in)) {
		t.Error("healthy fixture needs action")
	}
}

func TestDoctorWorldWritableProfileDir(t *testing.T) {
	f := newDoctorFixture(t)
	dir := filepath.Join(f.home, "profiles", "work")
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	got := f.run(t)
	expectStatus(t, got, "stores", statusFail, dir+" has mode 0777")
	if fix := got["stores"].Fix; fix != "chmod go-w "+dir {
		t.Errorf("fix = %q", fix)
	}
	if !needsAction(runDoctor(context.Background(), f.in)) {
		t.Error("a world-writable profile directory does not need action")
	}

	// Group-writable is as bad: a sticky bit would not help either, since
	// others could still plant a -wal or -shm that does not exist yet.
	os.Chmod(dir, 0o770)
	expectStatus(t, f.run(t), "stores", statusFail, dir+" has mode 0770")
	os.Chmod(dir, 0o700)
	expectStatus(t, f.run(t), "stores", statusOK, "")
}

func TestDoctorStoreModeAndOwner(t *testing.T) {
	f := newDoctorFixture(t)
	db := filepath.Join(f.home, "state.db")
	os.Chmod(db, 0o644)
	expectStatus(t, f.run(t), "stores", statusWarn, db+" has mode 0644")
	os.Chmod(db, 0o666)
	expectStatus(t, f.run(t), "stores", statusFail, "others can write")
	os.Chmod(db, 0o600)
	if os.Geteuid() == 0 {
		if err := os.Chown(db, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, f.run(t), "stores", statusWarn, "owned by uid 4242")
	}
}

func TestDoctorLowInotifyLimit(t *testing.T) {
	f := newDoctorFixture(t)
	// home, home/profiles, home/profiles/work: three directories.
	f.write(t, "sys/max_user_watches", "2\n")
	got := f.run(t)
	expectStatus(t, got, "inotify", statusFail, "max_user_watches=2")
	expectStatus(t, got, "inotify", statusFail, "3 directories")
	if !strings.Contains(got["inotify"].Fix, "fs.inotify.max_user_watches=") {
		t.Errorf("fix = %q", got["inotify"].Fix)
	}
	f.write(t, "sys/max_user_watches", "100\n")
	expectStatus(t, f.run(t), "inotify", statusWarn, "max_user_watches=100")
	f.write(t, "sys/max_user_watches", "524288\n")
	f.write(t, "sys/max_user_instances", "0\n")
	expectStatus(t, f.run(t), "inotify", statusFail, "max_user_instances=0")
}

func TestDoctorNonRootWithoutCapabilities(t *testing.T) {
	f := newDoctorFixture(t)
	f.in.euid = 1000
	f.write(t, "proc/status", "Name:\tagentd\nUid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n")
	got := f.run(t)
	expectStatus(t, got, "privileges", statusWarn, "not root and lacks CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_KILL CAP_CHOWN CAP_FOWNER")
	// The system service, never file capabilities that every local user
	// running the binary would get.
	if fix := got["privileges"].Fix; !strings.Contains(fix, "agentd install") || strings.Contains(fix, "setcap") || strings.Contains(fix, "+ep") {
		t.Errorf("fix = %q: want the system service, no setcap", fix)
	}

	// The listed capabilities are enough without root (CapEff 0x8002d).
	f.write(t, "proc/status", "Uid:\t1000\t1000\t1000\t1000\nCapEff:\t000000000008002d\n")
	expectStatus(t, f.run(t), "privileges", statusOK, "CAP_SYS_PTRACE")
	// One missing is named.
	f.write(t, "proc/status", "Uid:\t1000\t1000\t1000\t1000\nCapEff:\t000000000000002d\n")
	expectStatus(t, f.run(t), "privileges", statusWarn, "lacks CAP_SYS_PTRACE")
	// Root with the capabilities dropped (a container) needs action.
	f.in.euid = 0
	f.write(t, "proc/status", "Uid:\t0\t0\t0\t0\nCapEff:\t0000000000000000\n")
	expectStatus(t, f.run(t), "privileges", statusFail, "is root but lacks")
}

// The verdict rule in effect is explained, with its residual risk, and
// for an agent without privileges what it can and cannot see and freeze.
func TestDoctorVerdictRule(t *testing.T) {
	f := newDoctorFixture(t)
	got := f.run(t)
	expectStatus(t, got, "holder verdict", statusOK, "rule locks")
	expectStatus(t, got, "holder verdict", statusOK, "DELETE journal mode")
	expectStatus(t, got, "holder verdict", statusOK, "1 locks now")

	f.write(t, "agent.toml", fmt.Sprintf("state_dir = %q\nverdict = \"strict\"\n", f.stateDir))
	expectStatus(t, f.run(t), "holder verdict", statusOK, "rule strict")

	// A user-mode agent: what it sees and freezes, and the fix.
	f.write(t, "agent.toml", fmt.Sprintf("state_dir = %q\n", f.stateDir))
	f.in.euid = 1000
	f.write(t, "proc/status", "Uid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n")
	got = f.run(t)
	expectStatus(t, got, "holder verdict", statusWarn, "only their locks")
	expectStatus(t, got, "holder verdict", statusWarn, "can freeze and kill only uid 1000's processes")
	if !strings.Contains(got["holder verdict"].Fix, "agentd install") {
		t.Errorf("fix = %q", got["holder verdict"].Fix)
	}
	// No lock table: the rule has nothing to judge by.
	os.Remove(filepath.Join(f.base, "proc/locks"))
	expectStatus(t, f.run(t), "holder verdict", statusWarn, "as the strict rule does")
	// macOS: a LaunchAgent cannot clear other users' processes.
	f.in.goos = "darwin"
	expectStatus(t, f.run(t), "holder verdict", statusWarn, "LaunchAgent")
}

func TestDoctorHidepid(t *testing.T) {
	f := newDoctorFixture(t)
	f.write(t, "proc/mountinfo", "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"+
		"22 1 0:21 / /proc rw,nosuid shared:12 - proc proc rw,hidepid=invisible,gid=4\n")
	expectStatus(t, f.run(t), "proc hidepid", statusOK, "CAP_SYS_PTRACE") // root with caps sees all
	f.in.euid = 1000
	f.write(t, "proc/status", "Uid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n")
	expectStatus(t, f.run(t), "proc hidepid", statusWarn, "hidepid=invisible")
	f.write(t, "proc/mountinfo", "22 1 0:21 / /proc rw - proc proc rw,hidepid=4\n")
	expectStatus(t, f.run(t), "proc hidepid", statusWarn, "hidepid=ptraceable")
	f.write(t, "proc/mountinfo", "22 1 0:21 / /proc rw - proc proc rw,hidepid=1\n")
	expectStatus(t, f.run(t), "proc hidepid", statusWarn, "say unknown")
	f.write(t, "proc/mountinfo", "22 1 0:21 / /proc rw - proc proc rw,hidepid=0\n")
	expectStatus(t, f.run(t), "proc hidepid", statusOK, "every process")
}

// stateJournal opens the fixture's journal with the supervisor's API, as
// agentd would.
func stateJournal(t *testing.T, f *doctorFixture) *journal.Journal {
	t.Helper()
	j, err := journal.Open(context.Background(), filepath.Join(f.stateDir, journal.FileName), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func TestDoctorFailingReplayJobs(t *testing.T) {
	ctx := context.Background()
	f := newDoctorFixture(t)
	j := stateJournal(t, f)
	db := filepath.Join(f.home, "state.db")
	expectStatus(t, f.run(t), "replay jobs", statusOK, "no replay job failing")

	// A job that gave up for good.
	job, err := j.EnqueueJob(ctx, journal.Job{Store: db, Path: filepath.Join(f.base, "a.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := j.ClaimNextJob(ctx, time.Now()); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if _, err := j.FailJob(ctx, job.ID, time.Now(), fmt.Errorf("store refuses it: %w", journal.ErrNoRetry), journal.Backoff{}); err != nil {
		t.Fatal(err)
	}
	got := f.run(t)
	expectStatus(t, got, "replay jobs", statusFail, "store refuses it")
	expectStatus(t, got, "replay jobs", statusFail, "a.jsonl")

	// A stale one: still queued, but retried more than maxHealthyAttempts
	// times. Both are listed.
	stale, err := j.EnqueueJob(ctx, journal.Job{Store: db, Path: filepath.Join(f.base, "b.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= maxHealthyAttempts; i++ {
		now := time.Now().Add(time.Duration(i) * time.Hour)
		c, ok, err := j.ClaimNextJob(ctx, now)
		if err != nil || !ok || c.ID != stale.ID {
			t.Fatalf("claim %d: %+v %v %v", i, c, ok, err)
		}
		if _, err := j.FailJob(ctx, stale.ID, now, errors.New("database is locked"), journal.Backoff{Base: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	got = f.run(t)
	expectStatus(t, got, "replay jobs", statusFail, "2 replay job(s)")
	expectStatus(t, got, "replay jobs", statusFail, "database is locked")
	if !needsAction(runDoctor(ctx, f.in)) {
		t.Error("failing replay jobs do not need action")
	}
	// The doctor never writes the journal: its file is unchanged.
	before, _ := os.Stat(filepath.Join(f.stateDir, journal.FileName))
	f.run(t)
	after, _ := os.Stat(filepath.Join(f.stateDir, journal.FileName))
	if !before.ModTime().Equal(after.ModTime()) || before.Size() != after.Size() {
		t.Error("doctor changed the journal")
	}
}

func TestDoctorCapturesWaiting(t *testing.T) {
	ctx := context.Background()
	f := newDoctorFixture(t)
	db := filepath.Join(f.home, "profiles", "work", "state.db")
	done := db + ".retired-wal-20261101-120000-4242"
	waiting := db + ".retired-wal-20261102-120000-4343"
	partial := db + ".retired-wal-20261103-120000-4444.partial"
	for _, d := range []string{done, waiting, partial} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	j := stateJournal(t, f)
	inc, err := j.OpenIncident(ctx, journal.Incident{Store: db, Kind: journal.KindReplaced,
		Detail: journal.IncidentDetail{CapturePath: done}})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Transition(ctx, inc.ID, journal.StateResolved, journal.Step{Name: "resolved"}); err != nil {
		t.Fatal(err)
	}
	got := f.run(t)
	expectStatus(t, got, "captures", statusWarn, "1 capture(s) waiting, 1 interrupted")
	expectStatus(t, got, "captures", statusWarn, waiting)
	if text := strings.Join(got["captures"].Details, "\n"); strings.Contains(text, done) {
		t.Errorf("a resolved incident's capture is listed as waiting:\n%s", text)
	}
}

func TestDoctorListsUnrecoverable(t *testing.T) {
	ctx := context.Background()
	f := newDoctorFixture(t)
	db := filepath.Join(f.home, "profiles", "work", "state.db")
	raw := db + ".retired-wal-20261104-120000-4545"
	if err := os.Mkdir(raw, 0o700); err != nil {
		t.Fatal(err)
	}
	got := f.run(t)
	expectStatus(t, got, "unrecoverable incidents", statusOK, "none")
	j := stateJournal(t, f)
	inc, err := j.OpenIncident(ctx, journal.Incident{Store: db, Kind: journal.KindRewritten,
		Detail: journal.IncidentDetail{CapturePath: raw}})
	if err != nil {
		t.Fatal(err)
	}
	why := "the capture's WAL fits no main; lost: every row only the orphaned generation held; the raw files are kept in " + raw
	if _, err := j.UpdateIncident(ctx, inc.ID, journal.Step{Name: journal.StepUnrecoverable}, func(in *journal.Incident) error {
		in.State, in.Detail.Error = journal.StateUnrecoverable, why
		in.Detail.Salvage = &journal.SalvageRecord{LostMessages: 7, SessionsSeen: []string{"s1"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got = f.run(t)
	expectStatus(t, got, "unrecoverable incidents", statusFail, "1 incident(s) ended unrecoverable")
	expectStatus(t, got, "unrecoverable incidents", statusFail, why)
	expectStatus(t, got, "unrecoverable incidents", statusFail, "7 lost")
	if text := strings.Join(got["captures"].Details, "\n"); strings.Contains(text, raw) {
		t.Errorf("an unrecoverable incident's raw files are listed as a capture waiting for replay:\n%s", text)
	}
}

func TestDoctorGuardPaused(t *testing.T) {
	f := newDoctorFixture(t)
	j := stateJournal(t, f)
	db := filepath.Join(f.home, "state.db")
	if _, err := j.PauseGuard(context.Background(), db, time.Now().Add(15*time.Minute), "vacuum"); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, f.run(t), "guard", statusOK, "paused until")
	f.write(t, "agent.toml", fmt.Sprintf("state_dir = %q\nguard = false\n", f.stateDir))
	expectStatus(t, f.run(t), "guard", statusWarn, "guard = false")
}

func TestDoctorConfigInvalid(t *testing.T) {
	f := newDoctorFixture(t)
	f.write(t, "agent.toml", "reconcile = \"10s\"\nmetrics.listen = \"0.0.0.0:9477\"\n")
	f.in.configExplicit = true
	got := f.run(t)
	expectStatus(t, got, "config", statusFail, "line 2")
	expectStatus(t, got, "config", statusFail, "metrics.listen")
}

func TestDoctorStateDir(t *testing.T) {
	f := newDoctorFixture(t)
	os.Chmod(f.stateDir, 0o777)
	expectStatus(t, f.run(t), "state dir", statusFail, "mode 0777")
	os.Chmod(f.stateDir, 0o700)
	os.RemoveAll(f.stateDir)
	expectStatus(t, f.run(t), "state dir", statusOK, "does not exist yet")
	expectStatus(t, f.run(t), "replay jobs", statusOK, "no journal yet")
}

func TestDoctorServiceInstalled(t *testing.T) {
	f := newDoctorFixture(t)
	expectStatus(t, f.run(t), "service", statusOK, "installed")
	f.in.unitPaths = []string{filepath.Join(f.base, "nowhere.service")}
	expectStatus(t, f.run(t), "service", statusWarn, "not installed")
}

func TestDoctorDaemon(t *testing.T) {
	f := newDoctorFixture(t)
	sock := filepath.Join(f.base, "run", "agent.sock")
	expectStatus(t, f.run(t), "daemon", statusWarn, "not running")

	// A real control server, answering /v1/status.
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("{}")) })
	srv, err := supervisor.ListenControl(sock, mux, nil)
	if err != nil {
		t.Fatal(err)
	}
	expectStatus(t, f.run(t), "daemon", statusOK, "answers on "+sock)
	if err := srv.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// A socket nobody listens on: an agent that died.
	stale := filepath.Join(f.base, "run", "stale.sock")
	f.write(t, "agent.toml", fmt.Sprintf("state_dir = %q\nsocket = %q\n", f.stateDir, stale))
	makeStaleSocket(t, stale)
	expectStatus(t, f.run(t), "daemon", statusFail, "nobody listens")
}

func TestDoctorSQLiteVersion(t *testing.T) {
	got := checkSQLite(context.Background())
	if got.Status != statusOK {
		t.Errorf("embedded SQLite: %+v", got)
	}
	for _, tt := range []struct {
		v    string
		want bool
	}{{"3.51.3", true}, {"3.51.2", false}, {"3.52.0", true}, {"3.9.9", false}, {"4.0", true}, {"3.51", false}, {"x", false}} {
		if got := store.VersionAtLeast(tt.v, store.MinSQLiteVersion); got != tt.want {
			t.Errorf("VersionAtLeast(%s) = %v", tt.v, got)
		}
	}
}

func TestDoctorVerb(t *testing.T) {
	f := newDoctorFixture(t)
	// Through the CLI, on the real host's /proc: the config is the only
	// input a user can name, and a broken one must give exit 1 and JSON
	// that says so.
	f.write(t, "bad.toml", "policy.replaced = \"explode\"\n")
	var stdout, stderr bytes.Buffer
	e := newEnv(nil, &stdout, &stderr, f.in.getenv)
	code := runCLI(context.Background(), e, []string{"doctor", "--json", "--config", filepath.Join(f.base, "bad.toml")})
	if code != exitError {
		t.Errorf("exit %d, want %d; stderr %s", code, exitError, stderr.String())
	}
	var rep struct {
		Checks      []checkResult `json:"checks"`
		NeedsAction bool          `json:"needs_action"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, stdout.String())
	}
	if !rep.NeedsAction || len(rep.Checks) < 12 || rep.Checks[0].Name != "config" || rep.Checks[0].Status != statusFail {
		t.Errorf("report: %+v", rep)
	}

	stdout.Reset()
	code = runCLI(context.Background(), e, []string{"doctor", "--config", filepath.Join(f.base, "bad.toml")})
	if code != exitError || !strings.Contains(stdout.String(), "FAIL  config") || !strings.Contains(stdout.String(), "fix: ") {
		t.Errorf("text report (exit %d):\n%s", code, stdout.String())
	}
	if code := runCLI(context.Background(), e, []string{"doctor", "extra"}); code != exitUsage {
		t.Errorf("doctor extra: exit %d", code)
	}
}

func TestParseProcStatus(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "status")
	os.WriteFile(p, []byte("Name:\tx\nUid:\t1000\t1001\t1000\t1000\nCapEff:\t000000000008002d\n"), 0o644)
	ps := parseProcStatus(p)
	if ps.err != nil || ps.euid != 1001 || ps.capEff != 0x8002d || len(missingCaps(ps.capEff)) != 0 {
		t.Errorf("parseProcStatus = %+v", ps)
	}
	os.WriteFile(p, []byte("Name:\tx\n"), 0o644)
	if ps := parseProcStatus(p); ps.err == nil {
		t.Error("status without CapEff accepted")
	}
	// This process's own status parses too.
	if ps := parseProcStatus("/proc/self/status"); ps.err != nil && !errors.Is(ps.err, os.ErrNotExist) {
		t.Errorf("/proc/self/status: %v", ps.err)
	}
}

// makeStaleSocket leaves a socket file nobody listens on, as a killed
// agent does.
func makeStaleSocket(t *testing.T, path string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o700)
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
}
