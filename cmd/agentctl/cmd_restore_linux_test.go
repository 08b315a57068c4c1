package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// A writer holds the store: restore refuses, lists it, exits 3, and the
// store is byte for byte what it was.
func TestRestoreRefusesHeldStore(t *testing.T) {
	f := newRestoreFixture(t, 5)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: f.db, Count: 20, Linger: true})
	w.WaitAcks(t, 20)
	before := hermestest.DirState(t, f.home, "-shm")

	r := ctl(t, noDaemon(t), "restore", "--db", f.db, f.backup)
	if r.code != exitRefused {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, exitRefused, r.stdout, r.stderr)
	}
	mustContain(t, "stderr", r.stderr, "refused", "pid "+strconv.Itoa(w.Pid), "--stop-writers", "Nothing was changed")
	if strings.Contains(r.stdout, "restored") {
		t.Fatalf("a refused restore printed a success line:\n%s", r.stdout)
	}
	if got := hermestest.DirState(t, f.home, "-shm"); got != before {
		t.Fatalf("store changed:\n%s\nwas\n%s", got, before)
	}
}

// --stop-writers freezes the writer for the restore and releases it by
// the chosen policy. With resume the writer goes on in the restored store
// (same inode); with terminate it exits cleanly; with kill it dies.
func TestRestoreStopWriters(t *testing.T) {
	for _, pol := range []string{"resume", "terminate", "kill"} {
		t.Run(pol, func(t *testing.T) {
			f := newRestoreFixture(t, 0)
			w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: f.db, Rate: 300})
			w.WaitAcks(t, 10)
			hermestest.VacuumInto(t, f.db, f.backup+".2") // the backup: the store some rows ago
			backup := f.backup + ".2"
			seq := backupSeq(t, backup)
			w.WaitAcks(t, int(seq)+30)
			ino := inode(t, f.db)

			cfg := filepath.Join(t.TempDir(), "agent.toml")
			writeFile(t, cfg, "[policy]\nreplaced = \""+pol+"\"\ngrace = \"10s\"\n")
			r := ctl(t, noDaemon(t), "restore", "--db", f.db, "--stop-writers", "--config", cfg, backup)
			if r.code != exitOK {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
			t.Log(r.stdout)
			mustContain(t, "stdout", r.stdout, "online", "kept", "integrity_check ok", "safety copy: "+f.db+".pre-restore-",
				"writer pid "+strconv.Itoa(w.Pid))
			if inode(t, f.db) != ino {
				t.Fatal("the online restore changed the main file's inode")
			}
			switch pol {
			case "resume":
				n := len(w.Acks(t))
				w.WaitAcks(t, n+20)
				if err := w.Stop(10 * time.Second); err != nil {
					t.Fatal(err)
				}
				sawRestore(t, f.db, seq, w.Acks(t), "s1")
			case "terminate":
				select {
				case <-w.Done():
				case <-time.After(15 * time.Second):
					t.Fatal("writer still running after terminate")
				}
				if _, err := w.Exited(); err != nil {
					t.Fatalf("terminated writer did not exit cleanly: %v", err)
				}
			case "kill":
				<-w.Done()
				_, err := w.Exited()
				if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("writer exit: %v, want SIGKILL", err)
				}
			}
			if s := integrityOf(t, f.db); s != "ok" {
				t.Fatalf("integrity_check: %s", s)
			}
		})
	}
}

// The store's files were deleted while a writer still holds them: a
// publish would leave it writing into files nobody can see. Refused, with
// or without --stop-writers, and nothing is created.
func TestRestoreRefusesMissingStoreWithHeldSidecars(t *testing.T) {
	f := newRestoreFixture(t, 3)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: f.db, Count: 5, Linger: true})
	w.WaitAcks(t, 5)
	for _, s := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(f.db + s); err != nil {
			t.Fatal(err)
		}
	}
	before := hermestest.DirState(t, f.home, "-shm")
	for _, extra := range [][]string{nil, {"--stop-writers", "--release", "resume"}} {
		args := append([]string{"restore", "--db", f.db}, extra...)
		r := ctl(t, noDaemon(t), append(args, f.backup)...)
		if r.code != exitRefused {
			t.Fatalf("%v: exit %d\nstdout: %s\nstderr: %s", extra, r.code, r.stdout, r.stderr)
		}
		mustContain(t, "stderr", r.stderr, "missing", "pid "+strconv.Itoa(w.Pid), "deleted or replaced")
		if got := hermestest.DirState(t, f.home, "-shm"); got != before {
			t.Fatalf("directory changed:\n%s", got)
		}
	}
	if hermestest.StateOf(w.Pid) == 'T' {
		t.Fatal("a refused restore left the writer frozen")
	}
}

// Under the strict verdict rule a process the scan cannot inspect (this
// sandbox's PID 1) makes the verdict unknown, and restore refuses with
// exit 3; --force lets through only what cannot orphan anyone.
func TestRestoreStrictRuleUnknownRefused(t *testing.T) {
	if !pid1Hidden() {
		t.Skip("this host's scan can see every process as root; TestRestoreUnprivileged covers unknown")
	}
	f := newRestoreFixture(t, 3)
	strict := filepath.Join(t.TempDir(), "agent.toml")
	writeFile(t, strict, "verdict = \"strict\"\n")
	before := hermestest.DirState(t, f.home, "-shm")
	r := ctl(t, noDaemon(t), "restore", "--db", f.db, "--config", strict, f.backup)
	if r.code != exitRefused {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	mustContain(t, "stderr", r.stderr, "verdict unknown", "pid 1:", "--force")
	if got := hermestest.DirState(t, f.home, "-shm"); got != before {
		t.Fatalf("store changed:\n%s", got)
	}
	// --force restores online (nothing can be orphaned by it)...
	r = ctl(t, noDaemon(t), "restore", "--db", f.db, "--config", strict, "--force", f.backup)
	if r.code != exitOK {
		t.Fatalf("--force: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// ...but never lets a publish replace a broken main.
	writeFile(t, f.db, "garbage where a store was")
	os.Remove(f.db + "-wal")
	os.Remove(f.db + "-shm")
	before = hermestest.DirState(t, f.home, "-shm")
	r = ctl(t, noDaemon(t), "restore", "--db", f.db, "--config", strict, "--force", f.backup)
	if r.code != exitRefused {
		t.Fatalf("--force over a broken main: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	mustContain(t, "stderr", r.stderr, "--force does not override it")
	if got := hermestest.DirState(t, f.home, "-shm"); got != before {
		t.Fatalf("store changed:\n%s", got)
	}
}

// Under the default rule the same uninspectable PID 1, which holds no lock
// on the store, does not stop a restore: it is summarized and the online
// restore goes ahead.
func TestRestoreLocksRuleClearsLocklessProcesses(t *testing.T) {
	f := newRestoreFixture(t, 3)
	r := ctl(t, noDaemon(t), "restore", "--db", f.db, f.backup)
	if r.code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	mustContain(t, "stdout", r.stdout, "online", "integrity_check ok")
	if pid1Hidden() {
		mustContain(t, "stdout", r.stdout, "holder scan (rule locks): 1 process not inspectable even by root; none holds a lock on this store")
	}
}

// An unprivileged agentctl cannot inspect root's processes. On its own
// store, with the default rule, they hold no lock on it and do not count:
// the restore runs. With the strict rule they make the scan unknown and
// the restore is refused.
func TestRestoreUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run agentctl as another user")
	}
	// A user of its own, not nobody: other packages' tests run processes
	// as nobody, and one caught between setuid and exec is not
	// inspectable even by its own uid, which rightly makes the scan
	// unknown and the restore refused.
	nobody, nobodyGid := hermestest.AddUser(t, "sgctl-restorer")
	base, bin := agentctlForAll(t, "sg-restore-nobody-")
	strict := filepath.Join(base, "strict.toml")
	writeFile(t, strict, "verdict = \"strict\"\n")
	if err := os.Chmod(strict, 0o644); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(base, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(home, "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	appendRows(t, db, "s1", 3)
	backup := filepath.Join(home, "backup.db")
	hermestest.VacuumInto(t, db, backup)
	appendRows(t, db, "s2", 2)
	for _, p := range []string{home, db, db + "-wal", db + "-shm", backup} {
		if err := os.Lchown(p, nobody, nobodyGid); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (int, string) {
		cmd := exec.Command(bin, append([]string{"restore", "--db", db}, args...)...)
		cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin", socketEnv + "=" + filepath.Join(home, "no.sock")}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(nobody), Gid: uint32(nobodyGid)}}
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	before := hermestest.DirState(t, home, "-shm")
	code, out := run("--config", strict, backup)
	if code != exitRefused {
		t.Fatalf("strict rule: exit %d, want %d\n%s", code, exitRefused, out)
	}
	mustContain(t, "output", out, "verdict unknown")
	if got := hermestest.DirState(t, home, "-shm"); got != before {
		t.Fatalf("store changed:\n%s\nwas\n%s", got, before)
	}
	code, out = run(backup)
	if code != exitOK {
		t.Fatalf("locks rule: exit %d, want 0\n%s", code, out)
	}
	mustContain(t, "output", out, "of other users not inspected; none holds a lock on this store", "after:  1 sessions, 3 messages")

	// A writer nobody cannot inspect (root's) is a holder by its locks:
	// the restore refuses, naming it.
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 50})
	w.WaitAcks(t, 2)
	code, out = run(backup)
	if code != exitRefused {
		t.Fatalf("held by root's writer: exit %d, want %d\n%s", code, exitRefused, out)
	}
	mustContain(t, "output", out, "pid "+strconv.Itoa(w.Pid), "seen by its lock only", "--stop-writers")
}

// With no process holding it, a broken store with leftover sidecars is
// published: the broken files kept as the safety copy, sidecars removed.
func TestRestorePublishBrokenClear(t *testing.T) {
	f := newRestoreFixture(t, 4)
	writeFile(t, f.db, "not a database any more")
	writeFile(t, f.db+"-wal", "stale frames")
	os.Remove(f.db + "-shm")
	r := ctl(t, noDaemon(t), "restore", "--profile", "default", "--home", f.home, f.backup)
	if r.code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	t.Log(r.stdout)
	mustContain(t, "stdout", r.stdout, "broken: no SQLite header", "publish", "removed leftover "+f.db+"-wal", "after:  1 sessions, 4 messages")
	ents, _ := filepath.Glob(f.db + ".pre-restore-*")
	if len(ents) != 2 {
		t.Fatalf("safety copy files %v, want main and -wal", ents)
	}
	if integrityOf(t, f.db) != "ok" {
		t.Fatal("published store fails integrity_check")
	}
}

// Bad input: a clear message, exit 1, nothing changed.
func TestRestoreBadInput(t *testing.T) {
	f := newRestoreFixture(t, 2)
	junk := filepath.Join(t.TempDir(), "junk.db")
	writeFile(t, junk, "definitely not SQLite")
	link := filepath.Join(t.TempDir(), "link.db")
	if err := os.Symlink(f.backup, link); err != nil {
		t.Fatal(err)
	}
	before := hermestest.DirState(t, f.home, "-shm")
	cases := []struct {
		args []string
		want string
		code int
	}{
		{[]string{"--db", f.db, junk}, "not a SQLite database", exitError},
		{[]string{"--db", f.db, link}, "is a symlink", exitError},
		{[]string{"--db", filepath.Join(f.home, "nowhere", "state.db"), f.backup}, "does not exist", exitError},
		{[]string{"--profile", "ghost", "--home", f.home, f.backup}, "no profile", exitError},
		{[]string{f.backup}, "--profile P", exitUsage},
		{[]string{"--db", f.db, "--release", "kill", f.backup}, "only with --stop-writers", exitUsage},
		{[]string{"--db", f.db, "--stop-writers", "--release", "observe", f.backup}, "want terminate", exitUsage},
	}
	for _, tc := range cases {
		r := ctl(t, noDaemon(t), append([]string{"restore"}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
	if got := hermestest.DirState(t, f.home, "-shm"); got != before {
		t.Fatalf("store changed:\n%s", got)
	}
}
