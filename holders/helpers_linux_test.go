package holders

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

const nobody = 65534

// helperBinary copies the test binary where an unprivileged user can run it.
func helperBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	openUp(t, dir)
	bin := filepath.Join(dir, "scanhelper")
	hermestest.CopyFile(t, self, bin, 0o755)
	return bin
}

// openUp makes dir and its test-owned parents traversable by others.
func openUp(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// scanSession is the scan helper running under another uid with one
// Cache: every scan() is a Cache.Scan there, so what it learned in one
// scan (the inodes of a generation) serves the next, as in agentd.
type scanSession struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startScanSession(t *testing.T, uid uint32, rule Rule, dbs ...string) *scanSession {
	t.Helper()
	cmd := exec.Command(helperBinary(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), scanHelperEnv+"="+strings.Join(dbs, ":"), scanRuleEnv+"="+string(rule))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	cmd.Stderr = os.Stderr
	in, out := hermestest.StartPiped(t, cmd)
	return &scanSession{t: t, cmd: cmd, in: in, out: out}
}

func (s *scanSession) scan() *Result {
	s.t.Helper()
	if _, err := io.WriteString(s.in, "scan\n"); err != nil {
		s.t.Fatal(err)
	}
	line, err := s.out.ReadBytes('\n')
	if err != nil {
		s.t.Fatalf("scan helper: %v", err)
	}
	var res Result
	if err := json.Unmarshal(line, &res); err != nil {
		s.t.Fatalf("decode %q: %v", line, err)
	}
	return &res
}

// scanAs runs one scan of db as uid under rule.
func scanAs(t *testing.T, uid uint32, rule Rule, db string) *StoreResult {
	t.Helper()
	res := startScanSession(t, uid, rule, db).scan()
	if len(res.Stores) != 1 {
		t.Fatalf("helper returned %d stores", len(res.Stores))
	}
	return &res.Stores[0]
}

// scanHelper serves startScanSession: one Cache.Scan per line on stdin.
func scanHelper(paths string) {
	var targets []Target
	for _, p := range strings.Split(paths, ":") {
		targets = append(targets, Target{Path: p})
	}
	var c Cache
	c.SetRule(Rule(os.Getenv(scanRuleEnv)))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		res, err := c.Scan(targets)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(0)
}

// noKernelThreads fails if a kernel thread is listed or summarized.
func noKernelThreads(t *testing.T, s *StoreResult) {
	t.Helper()
	pids := slices.Clone(s.Uninspected.Pids)
	for _, b := range s.Blind {
		pids = append(pids, b.Pid)
	}
	for _, pid := range pids {
		if pid <= 0 {
			continue
		}
		if st, err := readStat(pid); err == nil && st.Kthread() {
			t.Errorf("kernel thread %d listed: %+v %+v", pid, s.Blind, s.Uninspected)
		}
	}
	if _, err := os.Stat("/proc/2"); err == nil && slices.Contains(pids, 2) {
		t.Errorf("kthreadd (pid 2) listed")
	}
}

// holdOptions say how the hold helper holds its files.
type holdOptions struct {
	write       bool // O_RDWR instead of O_RDONLY
	ofd         bool // an OFD read lock on byte 128 of every file
	dup         bool // and a second fd on each open file description
	nondumpable bool // prctl(PR_SET_DUMPABLE, 0) once the files are open
	cred        *syscall.Credential
}

// holdFiles runs the test binary as a process holding paths open (and
// nothing else of them: no SQLite, so no POSIX lock), until cleanup.
func holdFiles(t *testing.T, o holdOptions, paths ...string) int {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if o.cred != nil {
		bin = helperBinary(t)
	}
	var flags []string
	if o.write {
		flags = append(flags, "write")
	}
	if o.ofd {
		flags = append(flags, "ofd")
	}
	if o.nondumpable {
		flags = append(flags, "nondumpable")
	}
	if o.dup {
		flags = append(flags, "dup")
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), holdHelperEnv+"="+strings.Join(paths, ":"), holdFlagsEnv+"="+strings.Join(flags, ","))
	if o.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.cred}
	}
	cmd.Stderr = os.Stderr
	_, out := hermestest.StartPiped(t, cmd)
	if line := hermestest.FirstLine(t, "hold helper", out, 30*time.Second); !strings.HasPrefix(line, "ready") {
		t.Fatalf("hold helper said %q", line)
	}
	return cmd.Process.Pid
}

// startMapHelper runs a process that maps path and closes its fd: a
// holder by mapping only, until cleanup.
func startMapHelper(t *testing.T, path string) int {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), mapHelperEnv+"="+path)
	cmd.Stderr = os.Stderr
	_, out := hermestest.StartPiped(t, cmd)
	if line := hermestest.FirstLine(t, "map helper", out, 30*time.Second); !strings.HasPrefix(line, "ready") {
		t.Fatalf("map helper said %q", line)
	}
	return cmd.Process.Pid
}

// holdInSleep runs `sleep 60` holding f as its fd 3, a process that holds
// a file and does nothing else with it, until cleanup; it returns its pid.
func holdInSleep(t *testing.T, f *os.File) int {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot run sleep: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

// startNobodyWriter runs, as root, a writer as nobody on a new store in a
// directory nobody owns (nondumpable: it makes itself undumpable).
func startNobodyWriter(t *testing.T, nondumpable bool) (string, *hermestest.Writer) {
	t.Helper()
	requireRoot(t)
	dir := t.TempDir()
	openUp(t, dir)
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "state.db")
	w := hermestest.StartWriter(t, hermestest.WriterOptions{
		DB: db, Create: true, Rate: 50, Ack: filepath.Join(dir, "ack"), NonDumpable: nondumpable,
		Credential: &syscall.Credential{Uid: nobody, Gid: nobody},
	})
	return db, w
}

// freezeStopped freezes ref and waits until it is stopped.
func freezeStopped(t *testing.T, ref ProcRef) {
	t.Helper()
	if err := Freeze(ref); err != nil {
		t.Fatal(err)
	}
	if err := WaitStopped(waitCtx(t), ref); err != nil {
		t.Fatal(err)
	}
}
