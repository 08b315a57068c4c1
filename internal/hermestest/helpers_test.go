package hermestest

import (
	"database/sql"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// The helpers other packages' tests wait and assert with: ProcState sees
// a stopped writer stopped and a gone one gone, WaitAcks and AcksGrow
// follow a live writer, RenameFreshOver and VacuumInto make a restore and
// a backup.
func TestHelpers(t *testing.T) {
	db := filepath.Join(t.TempDir(), "state.db")
	w := StartWriter(t, WriterOptions{DB: db, Create: true, Rate: 200})
	acks := w.WaitAcks(t, 5)
	w.AcksGrow(t, 3)
	if n := len(w.Acks(t)); n < len(acks)+3 {
		t.Fatalf("AcksGrow returned with %d acks, from %d", n, len(acks))
	}
	if runtime.GOOS == "linux" {
		if err := w.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		Eventually(t, "the writer stopped", 5*time.Second, func() bool { return StateOf(w.Pid) == 'T' })
		w.Cmd.Process.Signal(syscall.SIGCONT)
	} else if _, err := ProcState(w.Pid); err != ErrNoProc {
		t.Fatalf("ProcState on %s: %v, want ErrNoProc", runtime.GOOS, err)
	}

	backup := filepath.Join(t.TempDir(), "backup.db")
	VacuumInto(t, db, backup)
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if s := StateOf(w.Pid); s != 'X' {
		t.Fatalf("StateOf an exited writer = %c, want X", s)
	}
	before, _ := os.Stat(db)
	RenameFreshOver(t, db)
	after, err := os.Stat(db)
	if err != nil || os.SameFile(before, after) {
		t.Fatalf("RenameFreshOver left the old main (%v)", err)
	}
	for path, want := range map[string]int{db: 0, backup: len(acks)} {
		c, err := sql.Open("sqlite", DSN(path))
		if err != nil {
			t.Fatal(err)
		}
		var n int
		err = c.QueryRow("SELECT count(*) FROM messages").Scan(&n)
		c.Close()
		if err != nil || (want == 0 && n != 0) || n < want {
			t.Fatalf("%s: %d messages (%v), want %d", path, n, err, want)
		}
	}
}
