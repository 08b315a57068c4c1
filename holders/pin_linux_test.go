package holders

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
)

func readAll(t *testing.T, f *os.File) []byte {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return b
}

func readProcFD(t *testing.T, pid, fd int) []byte {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPinKeepsOrphanAliveAfterWriterDies(t *testing.T) {
	db, w := startStore(t)
	w.AcksGrow(t, 5)
	hermestest.RenameFreshOver(t, db)
	removeSidecars(t, db)
	s := scanOne(t, db)
	p := holder(t, s, w.Pid)
	ref := p.Ref()
	freezeStopped(t, ref)
	files := byRole(p)
	pinned := make(map[Role]*os.File)
	want := make(map[Role][]byte)
	for _, r := range []Role{RoleMain, RoleWAL} {
		h := files[r]
		if h.Current || h.FD < 0 {
			t.Fatalf("%s: want an orphan held by fd, got %+v", r, h)
		}
		f, err := Pin(w.Pid, h.FD, h.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		pinned[r] = f
		want[r] = readProcFD(t, w.Pid, h.FD)
		if got := readAll(t, f); !bytes.Equal(got, want[r]) {
			t.Fatalf("%s: pinned %d bytes differ from the holder's %d", r, len(got), len(want[r]))
		}
	}
	if !bytes.HasPrefix(want[RoleMain], []byte("SQLite format 3\x00")) {
		t.Fatalf("pinned main is not a SQLite file: %q", want[RoleMain][:16])
	}
	if len(want[RoleWAL]) <= 32 {
		t.Fatalf("pinned wal has %d bytes: the writer's commits are not in it", len(want[RoleWAL]))
	}

	if err := Kill(ref); err != nil {
		t.Fatal(err)
	}
	if err := WaitGone(waitCtx(t), ref); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	for r, f := range pinned {
		if got := readAll(t, f); !bytes.Equal(got, want[r]) {
			t.Fatalf("%s changed or vanished after the writer died", r)
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Nlink != 0 || st.Ino != files[r].ID.Ino {
			t.Fatalf("%s: pinned inode %d nlink %d (%v), want the unlinked orphan %v", r, st.Ino, st.Nlink, err, files[r].ID)
		}
	}
}

func TestPinRefusesOtherInode(t *testing.T) {
	db, w := startStore(t)
	s := scanOne(t, db)
	files := byRole(holder(t, s, w.Pid))
	if _, err := Pin(w.Pid, files[RoleMain].FD, files[RoleWAL].ID); !errors.Is(err, fileid.ErrIdentityChanged) {
		t.Fatalf("pinning main's fd as the wal: %v", err)
	}
	if _, err := Pin(w.Pid, 9999, files[RoleMain].ID); !errors.Is(err, fileid.ErrIdentityChanged) {
		t.Fatalf("pinning a closed fd: %v", err)
	}
	w.Kill()
	<-w.Done()
	if _, err := Pin(w.Pid, files[RoleMain].FD, files[RoleMain].ID); !errors.Is(err, ErrProcessGone) {
		t.Fatalf("pinning an fd of an exited process: %v", err)
	}
}

func TestPinMappedShm(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("map_files needs CAP_SYS_ADMIN")
	}
	db, w := startStore(t)
	removeSidecars(t, db)
	s := scanOne(t, db)
	shm := byRole(holder(t, s, w.Pid))[RoleSHM]
	if !shm.Mapped || shm.Current {
		t.Fatalf("want an orphan mapped shm, got %+v", shm)
	}
	f, err := PinMapped(w.Pid, shm.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || fileid.FromStat(&st) != shm.ID {
		t.Fatalf("pinned %d:%d (%v), want %v", st.Dev, st.Ino, err, shm.ID)
	}
	if len(readAll(t, f)) == 0 {
		t.Fatal("pinned shm is empty")
	}
	if _, err := PinMapped(w.Pid, fileid.ID{Dev: shm.ID.Dev, Ino: shm.ID.Ino + 1e9}); !errors.Is(err, fileid.ErrIdentityChanged) {
		t.Fatalf("pinning an unmapped inode: %v", err)
	}
}
