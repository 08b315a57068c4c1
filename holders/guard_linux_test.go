package holders

import (
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// locksOn lists /proc/locks entries on id (blocked waiters excluded).
func locksOn(t *testing.T, id fileid.ID) []hermestest.Lock {
	t.Helper()
	return hermestest.LocksOn(t, id.Dev, id.Ino)
}

func idOf(t *testing.T, path string) fileid.ID {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileid.Of(fi).ID
}

func walMode(h []byte) error {
	if len(h) < 20 || h[18] != 2 || h[19] != 2 {
		return errors.New("not in WAL mode")
	}
	return nil
}

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// The guard holds exactly two OFD read locks, the main file's SHARED range
// and -shm byte 128, and closing it leaves none.
func TestGuardLocksExactRanges(t *testing.T) {
	db, w := startStore(t)
	w.AcksGrow(t, 2)
	want := fileid.Family{Main: idOf(t, db), SHM: idOf(t, db+"-shm")}
	ranges := []struct {
		id         fileid.ID
		start, end string
	}{
		{want.Main, "1073741826", "1073742335"}, // [0x40000002, +510)
		{want.SHM, "128", "128"},
	}
	// /proc/locks is system-wide: count what is there before, so a lock
	// some other process of the machine holds is not taken for ours.
	ofd := func(id fileid.ID) (exact, other int) {
		for _, l := range locksOn(t, id) {
			if l.Class != "OFDLCK" {
				continue
			}
			for _, c := range ranges {
				if c.id == id && l.Mode == "READ" && l.Start == c.start && l.End == c.end {
					exact++
					goto next
				}
			}
			other++
		next:
		}
		return exact, other
	}
	before := map[fileid.ID][2]int{}
	for _, c := range ranges {
		e, o := ofd(c.id)
		before[c.id] = [2]int{e, o}
	}
	g, err := ArmGuard(db, want, walMode)
	if err != nil {
		t.Fatal(err)
	}
	if g.IDs() != want {
		t.Fatalf("IDs %+v, want %+v", g.IDs(), want)
	}
	for _, c := range ranges {
		e, o := ofd(c.id)
		if e != before[c.id][0]+1 || o != before[c.id][1] {
			t.Fatalf("OFD locks on %v: %d exact READ [%s,%s] and %d others, want %d and %d (%+v)",
				c.id, e, c.start, c.end, o, before[c.id][0]+1, before[c.id][1], locksOn(t, c.id))
		}
	}
	// The writer keeps committing with the guard armed.
	w.AcksGrow(t, 5)
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range ranges {
		if e, o := ofd(c.id); e != before[c.id][0] || o != before[c.id][1] {
			t.Fatalf("OFD lock left on %v after Close: %+v", c.id, locksOn(t, c.id))
		}
	}
}

// A guard refused for any reason leaves no fd and no lock behind.
func TestGuardRefusals(t *testing.T) {
	db, w := startStore(t)
	w.AcksGrow(t, 2)
	want := fileid.Family{Main: idOf(t, db), SHM: idOf(t, db+"-shm")}

	cases := []struct {
		name  string
		setup func(t *testing.T) (fileid.Family, func([]byte) error)
		is    error
	}{
		{"main replaced", func(*testing.T) (fileid.Family, func([]byte) error) {
			return fileid.Family{Main: fileid.ID{Dev: want.Main.Dev, Ino: want.Main.Ino + 1}, SHM: want.SHM}, walMode
		}, fileid.ErrIdentityChanged},
		{"shm replaced", func(*testing.T) (fileid.Family, func([]byte) error) {
			return fileid.Family{Main: want.Main, SHM: want.Main}, walMode
		}, fileid.ErrIdentityChanged},
		{"header refused", func(*testing.T) (fileid.Family, func([]byte) error) {
			errNo := errors.New("no")
			return want, func([]byte) error { return errNo }
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ids, check := c.setup(t)
			before := openFDs(t)
			g, err := ArmGuard(db, ids, check)
			if err == nil {
				g.Close()
				t.Fatal("armed, want an error")
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Fatalf("error %v, want %v", err, c.is)
			}
			if n := openFDs(t); n != before {
				t.Fatalf("%d fds open after a refused guard, %d before", n, before)
			}
			for _, id := range []fileid.ID{want.Main, want.SHM} {
				for _, l := range locksOn(t, id) {
					if l.Class == "OFDLCK" && l.Mode == "READ" {
						t.Fatalf("read lock left on %v: %+v", id, l)
					}
				}
			}
		})
	}
}

// A symlink put at the -shm path is never followed.
func TestGuardRefusesSymlink(t *testing.T) {
	db, w := startStore(t)
	w.AcksGrow(t, 2)
	want := fileid.Family{Main: idOf(t, db), SHM: idOf(t, db+"-shm")}
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	os.Remove(db + "-shm")
	if err := os.Symlink(db, db+"-shm"); err != nil {
		t.Fatal(err)
	}
	want.SHM = want.Main
	if g, err := ArmGuard(db, want, walMode); !errors.Is(err, fileid.ErrIdentityChanged) {
		if g != nil {
			g.Close()
		}
		t.Fatalf("error %v, want fileid.ErrIdentityChanged", err)
	}
}

// quietStore leaves a WAL-mode store with its -wal and -shm and no process
// holding it: a guard keeps the writer's close from removing them.
func quietStore(t *testing.T) (string, fileid.Family) {
	t.Helper()
	db, w := startStore(t)
	w.AcksGrow(t, 2)
	want := fileid.Family{Main: idOf(t, db), SHM: idOf(t, db+"-shm")}
	g, err := ArmGuard(db, want, walMode)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	return db, want
}

// A write lock held by another open file description (a connection in
// EXCLUSIVE mode, or one initialising the -shm) refuses the guard, which
// then holds nothing.
func TestGuardRefusedByWriteLock(t *testing.T) {
	db, want := quietStore(t)
	for _, c := range []struct {
		path  string
		start int64
	}{{db, sharedFirst + 100}, {db + "-shm", shmDMSByte}} {
		f, err := os.OpenFile(c.path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		lk := unix.Flock_t{Type: unix.F_WRLCK, Start: c.start, Len: 1}
		if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
			t.Fatal(err)
		}
		before := openFDs(t)
		g, err := ArmGuard(db, want, walMode)
		if !errors.Is(err, ErrGuardRefused) {
			if g != nil {
				g.Close()
			}
			t.Fatalf("write lock on %s: error %v, want ErrGuardRefused", c.path, err)
		}
		if n := openFDs(t); n != before {
			t.Fatalf("%d fds open after a refused guard, %d before", n, before)
		}
		for _, l := range append(locksOn(t, want.Main), locksOn(t, want.SHM)...) {
			if l.Mode == "READ" {
				t.Fatalf("read lock left: %+v", l)
			}
		}
		f.Close()
	}
	g, err := ArmGuard(db, want, walMode)
	if err != nil {
		t.Fatalf("arm once the write locks are gone: %v", err)
	}
	g.Close()
}

// The guard keeps the generation's -wal open (no lock on it), and Dup
// hands out copies that keep the main's read lock and the -wal's inode
// after the guard itself is closed: what an incident over an unlinked
// -wal of an idle store captures from.
func TestGuardHoldsWALAndDups(t *testing.T) {
	db, w := startStore(t)
	w.AcksGrow(t, 2)
	want := fileid.Family{Main: idOf(t, db), WAL: idOf(t, db+"-wal"), SHM: idOf(t, db+"-shm")}
	readLocks := func(id fileid.ID) int {
		n := 0
		for _, l := range locksOn(t, id) {
			if l.Class == "OFDLCK" && l.Mode == "READ" {
				n++
			}
		}
		return n
	}
	before := readLocks(want.Main)
	g, err := ArmGuard(db, want, walMode)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(g.WAL().Fd()), &st); err != nil || fileid.FromStat(&st) != want.WAL {
		t.Fatalf("guard's -wal fd is %v (%v), want %v", fileid.FromStat(&st), err, want.WAL)
	}
	if l := locksOn(t, want.WAL); len(l) != 0 {
		t.Fatalf("the guard locked the -wal: %+v", l)
	}
	d, err := g.Dup()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if n := readLocks(want.Main); n != before+1 {
		t.Fatalf("read locks on the main after the guard closed, its copy open: %d, want %d", n, before+1)
	}
	if err := os.Remove(db + "-wal"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(int(d.WAL.Fd()), &st); err != nil || st.Nlink != 0 || st.Ino != want.WAL.Ino {
		t.Fatalf("the copy does not hold the unlinked -wal: nlink %d ino %d (%v)", st.Nlink, st.Ino, err)
	}
	d.Close()
	if n := readLocks(want.Main); n != before {
		t.Fatalf("read locks on the main after the copy closed: %d, want %d", n, before)
	}
}

// The guard re-arms on the worker while a divert's read-only connection on
// the same store may be open on its own goroutine: closing the guard, or
// an incident's copy of it, must leave that connection's POSIX locks on
// the -shm (its read mark) in place (store.CloseSHM).
func TestGuardCloseKeepsTheAgentsSHMLocks(t *testing.T) {
	db, w := startStore(t)
	w.AcksGrow(t, 2)
	want := fileid.Family{Main: idOf(t, db), WAL: idOf(t, db+"-wal"), SHM: idOf(t, db+"-shm")}
	// Only this process's POSIX locks: the writer's own come and go
	// with each of its transactions.
	posix := func() int {
		n := 0
		for _, l := range locksOn(t, want.SHM) {
			if l.Class == "POSIX" && l.PID == os.Getpid() {
				n++
			}
		}
		return n
	}
	mine := posix()
	g, err := ArmGuard(db, want, walMode)
	if err != nil {
		t.Fatal(err)
	}
	d, err := g.Dup()
	if err != nil {
		t.Fatal(err)
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	tx, err := ro.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRow("SELECT count(*) FROM messages").Scan(&n); err != nil {
		t.Fatal(err)
	}
	held := posix()
	if held <= mine {
		t.Fatalf("the read transaction added no POSIX lock of this process on the -shm (%d, before it %d)", held, mine)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if got := posix(); got != held {
		t.Fatalf("POSIX locks on the -shm after the guard and its copy closed: %d, want %d", got, held)
	}
	tx.Rollback()
	ro.Close()
	if got := store.ParkedSHM(); got != 0 {
		t.Fatalf("-shm fds still parked after the store's last connection closed: %d", got)
	}
}
