package holders

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// A main renamed aside (`mv state.db state.db.old`, then anywhere on the
// filesystem) under a live writer is still the old generation's main: the
// writer is an orphan holder of main. A scan that remembers the
// generation (a Cache) finds it by inode, and so does a plain O_RDONLY
// holder with no lock; a scan without history finds the writer through
// its SQLite lock on the file it uses as main.
func TestRenamedAsideMainIsOrphanMain(t *testing.T) {
	db, w := startStore(t)
	var c Cache
	first, err := c.Scan([]Target{{Path: db}})
	if err != nil {
		t.Fatal(err)
	}
	before := first.Stores[0].Current
	reader := holdFiles(t, holdOptions{}, db) // no SQLite, no lock
	elsewhere := filepath.Join(t.TempDir(), "x")
	for _, to := range []string{db + ".old", elsewhere} {
		from := db
		if to == elsewhere {
			from = db + ".old"
		}
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
		res, err := c.Scan([]Target{{Path: db}})
		if err != nil {
			t.Fatal(err)
		}
		s := &res.Stores[0]
		for _, pid := range []int{w.Pid, reader} {
			m := byRole(holder(t, s, pid))[RoleMain]
			if m.Current || m.ID != before.Of(RoleMain).ID || m.Match != MatchInode || m.HostPath != to || m.Nlink != 1 {
				t.Errorf("%s: pid %d main %+v, want the orphan %v matched by inode at %s", to, pid, m, before.Of(RoleMain).ID, to)
			}
		}
		if p := holder(t, s, reader); p.Access != AccessRead {
			t.Errorf("the O_RDONLY holder's access is %s", p.Access)
		}
		fresh := scanOne(t, db)
		m := byRole(holder(t, fresh, w.Pid))[RoleMain]
		if m.Current || m.ID != before.Of(RoleMain).ID || m.Match != MatchSQLite || m.Path != to || !m.FDWrite {
			t.Errorf("%s, no history: writer main %+v, want the orphan found by its SQLite lock", to, m)
		}
		if !holder(t, fresh, w.Pid).Orphan() || fresh.Verdict != VerdictHeld {
			t.Errorf("%s, no history: writer not an orphan holder", to)
		}
	}
}

// startNamespacedWriter runs the test writer in its own mount and pid
// namespaces (`unshare --mount --pid --fork`) with the store's directory
// bind-mounted at another path, as a container with the profile home as
// a volume. It returns the path the writer sees.
func startNamespacedWriter(t *testing.T, dir string) string {
	t.Helper()
	requireRoot(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare (util-linux) is not installed")
	}
	bin, err := hermestest.WriterBinary()
	if err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(t.TempDir(), "volume")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(mnt, "state.db")
	args := hermestest.WriterOptions{DB: inner, Create: true, Rate: 50, Ack: filepath.Join(t.TempDir(), "ack")}.Args()
	script := fmt.Sprintf("mount --bind %q %q && exec %q \"$@\"", dir, mnt, bin)
	cmd := exec.Command(unshare, append([]string{"--mount", "--pid", "--fork", "--kill-child", "--propagation", "private", "sh", "-c", script, "writer"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && !strings.HasPrefix(line, "ready ") {
			err = fmt.Errorf("writer said %q", line)
		}
		ready <- err
		io.Copy(io.Discard, out)
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Skipf("namespaced writer did not start (no namespaces here?): %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("namespaced writer not ready")
	}
	return inner
}

// A writer in its own mount and pid namespaces, with the home
// bind-mounted at another path, is a holder: matched by inode, both paths
// shown, its host pid and its pid in its namespace; freeze, thaw and pin
// work on it by host pid. After a rename-over on the host it is an orphan
// holder of main.
func TestOtherNamespaceWriter(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	inner := startNamespacedWriter(t, dir)
	var c Cache
	res, err := c.Scan([]Target{{Path: db}})
	if err != nil {
		t.Fatal(err)
	}
	s := &res.Stores[0]
	if len(s.Holders) != 1 {
		t.Fatalf("holders %+v, want the namespaced writer", s.Holders)
	}
	p := &s.Holders[0]
	if !p.ForeignMountNS || p.NSPid != 1 || !p.Inspected || p.Access != AccessWrite {
		t.Errorf("holder %+v: want another mount namespace, pid 1 inside, inspected, a writer", p)
	}
	wantHeld(t, p, map[Role]bool{RoleMain: true, RoleWAL: true, RoleSHM: true}, s.Current)
	for _, f := range p.Files {
		if f.Path != inner+f.Role.Suffix() || f.HostPath != db+f.Role.Suffix() || f.Match != MatchInode {
			t.Errorf("%s: holder's path %q, host's %q, match %s; want %q and %q by inode", f.Role, f.Path, f.HostPath, f.Match,
				inner+f.Role.Suffix(), db+f.Role.Suffix())
		}
	}
	ref := p.Ref()
	freezeStopped(t, ref)
	main := byRole(p)[RoleMain]
	pin, err := Pin(p.Pid, main.FD, main.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Close()
	if b := readAll(t, pin); !strings.HasPrefix(string(b), "SQLite format 3\x00") {
		t.Fatalf("pinned %q, want the store's main", b[:16])
	}
	if err := Thaw(ref); err != nil {
		t.Fatal(err)
	}

	hermestest.RenameFreshOver(t, db)
	res, err = c.Scan([]Target{{Path: db}})
	if err != nil {
		t.Fatal(err)
	}
	s = &res.Stores[0]
	p = holder(t, s, ref.Pid)
	m := byRole(p)[RoleMain]
	if m.Current || m.ID != main.ID || m.Path != inner || !p.Orphan() {
		t.Fatalf("after the rename-over: main %+v, want the orphan %v", m, main.ID)
	}
	// Without history, the name the host sees decides.
	fresh := scanOne(t, db)
	if m := byRole(holder(t, fresh, ref.Pid))[RoleMain]; m.Current || m.Match != MatchName || m.HostPath != db {
		t.Errorf("no history: main %+v, want an orphan by its host name", m)
	}
}

// A FIFO put at state.db-wal and held open is nobody's WAL: the scan
// never matches it, and neither it nor a pin of it waits for a writer.
func TestFIFOAtWALBlocksNothing(t *testing.T) {
	db := hermestest.NewStore(t)
	os.Remove(db + "-wal")
	if err := unix.Mkfifo(db+"-wal", 0o644); err != nil {
		t.Fatal(err)
	}
	pid := holdFiles(t, holdOptions{}, db+"-wal")
	fd := fdOn(t, pid, db+"-wal")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan *StoreResult, 1)
	go func() { done <- scanOne(t, db) }()
	var s *StoreResult
	select {
	case s = <-done:
	case <-ctx.Done():
		t.Fatal("the scan blocked on a FIFO at the -wal path")
	}
	if st := s.Current.Of(RoleWAL); !st.Exists || st.Mode&os.ModeNamedPipe == 0 {
		t.Errorf("wal at the path: %+v, want the FIFO", st)
	}
	for _, p := range s.Holders {
		if p.Pid == pid {
			t.Fatalf("the FIFO's holder is listed as a holder: %+v", p)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(db+"-wal", &st); err != nil {
		t.Fatal(err)
	}
	pinned := make(chan error, 1)
	go func() {
		f, err := Pin(pid, fd, fileid.FromStat(&st))
		if f != nil {
			f.Close()
		}
		pinned <- err
	}()
	select {
	case err := <-pinned:
		if err == nil || !strings.Contains(err.Error(), "regular file") {
			t.Fatalf("pin of a FIFO: %v, want a refusal", err)
		}
	case <-ctx.Done():
		t.Fatal("a pin of a FIFO blocked")
	}
}

// fdOn returns the fd pid holds on path.
func fdOn(t *testing.T, pid int, path string) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == path {
			fd, _ := parseInt([]byte(e.Name()))
			return fd
		}
	}
	t.Fatalf("pid %d holds no fd on %s", pid, path)
	return -1
}

// startReadonlySQLite runs `sqlite3 -readonly` on db with a query done, so
// it holds the store as a read-only connection does.
func startReadonlySQLite(t *testing.T, db string) int {
	t.Helper()
	bin, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Skip("sqlite3 is not installed (apt-get install sqlite3)")
	}
	cmd := exec.Command(bin, "-readonly", db)
	in, out := hermestest.StartPiped(t, cmd)
	if _, err := io.WriteString(in, "SELECT count(*) FROM messages;\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := out.ReadString('\n'); err != nil {
		t.Fatalf("sqlite3 -readonly: %v", err)
	}
	return cmd.Process.Pid
}

// Writable and read-only fds and mappings are told apart: the writer can
// write every role; an O_RDONLY holder of main and -wal cannot write
// anything; a -shm fd open for writing but not mapped does not count as
// writing the generation. `sqlite3 -readonly` opens main read-only, but
// SQLite opens -wal and -shm read-write even for a read-only connection,
// so by the rule (a writable -wal fd) it may write the generation.
func TestWritableAndReadOnlyHolders(t *testing.T) {
	db, w := startStore(t)
	w.AcksGrow(t, 2)
	ro := holdFiles(t, holdOptions{}, db, db+"-wal")
	shmOnly := holdFiles(t, holdOptions{write: true}, db+"-shm")
	cli := startReadonlySQLite(t, db)
	s := scanOne(t, db)

	wp := holder(t, s, w.Pid)
	wf := byRole(wp)
	if wp.Access != AccessWrite || !wf[RoleMain].FDWrite || !wf[RoleWAL].FDWrite || !wf[RoleSHM].MapWrite {
		t.Errorf("writer: access %s files %+v", wp.Access, wp.Files)
	}
	rp := holder(t, s, ro)
	for _, f := range rp.Files {
		if f.FDWrite || f.MapWrite || f.Access != AccessRead {
			t.Errorf("O_RDONLY holder %s: %+v", f.Role, f)
		}
	}
	if rp.Access != AccessRead || rp.MayWrite() {
		t.Errorf("O_RDONLY holder access %s", rp.Access)
	}
	sp := holder(t, s, shmOnly)
	if f := byRole(sp)[RoleSHM]; !f.FDWrite || f.MapWrite || sp.Access != AccessRead {
		t.Errorf("unmapped -shm fd for writing: %+v, process access %s", f, sp.Access)
	}
	cp := holder(t, s, cli)
	cf := byRole(cp)
	if cf[RoleMain].FDWrite || !cf[RoleWAL].FDWrite || !cf[RoleSHM].MapWrite || cp.Access != AccessWrite {
		t.Errorf("sqlite3 -readonly: access %s main %+v wal %+v shm %+v", cp.Access, cf[RoleMain], cf[RoleWAL], cf[RoleSHM])
	}
}

// A process of our own mount namespace that opened the store through a
// bind mount of its directory at another path holds it: its link text is
// outside every watched directory, and the once-per-path stat finds the
// inode.
func TestBindMountAliasInOwnNamespace(t *testing.T) {
	requireRoot(t)
	db, w := startStore(t)
	alias := filepath.Join(t.TempDir(), "alias")
	if err := os.Mkdir(alias, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(filepath.Dir(db), alias, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(alias, unix.MNT_DETACH) })
	pid := holdFiles(t, holdOptions{}, filepath.Join(alias, "state.db"), filepath.Join(alias, "state.db-wal"))
	s := scanOne(t, db)
	holder(t, s, w.Pid)
	p := holder(t, s, pid)
	wantHeld(t, p, map[Role]bool{RoleMain: true, RoleWAL: true}, s.Current)
	if m := byRole(p)[RoleMain]; m.Path != filepath.Join(alias, "state.db") || m.HostPath != m.Path || p.ForeignMountNS {
		t.Errorf("main %+v: want the alias path, in our namespace", m)
	}
}
