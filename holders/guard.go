package holders

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/store"
)

// ErrGuardRefused means another open file description holds a write lock
// on one of the guard's ranges (a connection in EXCLUSIVE mode, or one
// initialising the -shm); trying again later may succeed.
var ErrGuardRefused = errors.New("guard lock refused")

// Guard holds OFD read locks on the SHARED range of one generation's main
// file and on the -shm dead-man-switch byte, through read-only fds of its
// own. While it is armed no SQLite connection can become "the last
// connection" of that generation, so none can checkpoint-and-unlink its
// -wal and -shm under a live writer. It never takes a write lock and
// touches no other byte, so readers and writers go on as before.
//
// It also keeps the generation's -wal open, unlocked: with no connection
// able to be the last closer nobody checkpoints a store that went idle,
// so the guard must be able to show what an unlinked -wal still held,
// and keep its inode alive for a capture.
//
// A Guard is not safe for concurrent use; its owner serializes Close.
type Guard struct {
	path           string
	main, wal, shm *os.File
	ids            fileid.Family
}

// ArmGuard opens mainPath, mainPath+"-shm" and (unless want.WAL is zero,
// a generation with no -wal yet) mainPath+"-wal" read-only (never following a
// symlink), checks that they are the inodes in want, lets check inspect the
// main file's first 100 bytes, and takes the two read locks. The header is
// checked before locking and again after: a database in rollback-journal
// mode needs the SHARED range to commit, so a guard there would block its
// writers, and check must refuse anything that is not in WAL mode.
//
// On error nothing stays open or locked.
func ArmGuard(mainPath string, want fileid.Family, check func(header []byte) error) (*Guard, error) {
	g := &Guard{path: mainPath, ids: want}
	var err error
	if g.main, err = openGuardFile(mainPath, want.Main); err != nil {
		return nil, err
	}
	fail := func(err error) (*Guard, error) {
		g.Close()
		return nil, err
	}
	if g.shm, err = openGuardSHM(mainPath, want.SHM); err != nil {
		return fail(err)
	}
	if !want.WAL.IsZero() {
		if g.wal, err = openGuardFile(mainPath+"-wal", want.WAL); err != nil {
			return fail(err)
		}
	}
	if err := g.checkHeader(check); err != nil {
		return fail(err)
	}
	if err := LockMainShared(g.main); err != nil {
		return fail(refused(err))
	}
	if err := LockSHMRead(g.shm); err != nil {
		return fail(refused(err))
	}
	// A switch out of WAL mode between the first look and the lock would
	// have needed EXCLUSIVE, which the lock now makes impossible; this
	// second look closes the window before it.
	if err := g.checkHeader(check); err != nil {
		return fail(err)
	}
	return g, nil
}

// openGuardFile opens path O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC and
// checks it is the regular file want.
func openGuardFile(path string, want fileid.ID) (*os.File, error) {
	return openGuardFileClose(path, want, (*os.File).Close)
}

// openGuardSHM is openGuardFile for the -shm of mainPath, which it closes
// with store.CloseSHM when it is not the file wanted: it may be the -shm
// of a connection of the agent's.
func openGuardSHM(mainPath string, want fileid.ID) (*os.File, error) {
	return openGuardFileClose(mainPath+"-shm", want, func(f *os.File) error { return store.CloseSHM(mainPath, f) })
}

func openGuardFileClose(path string, want fileid.ID, closeFile func(*os.File) error) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|guardOpenFlags, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || isSymlinkErr(err) {
			return nil, fmt.Errorf("guard %s: %w: %w", path, fileid.ErrIdentityChanged, err)
		}
		return nil, fmt.Errorf("guard: open %s: %w (the agent needs read access to the store's files)", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = closeFile(f)
		return nil, fmt.Errorf("guard: fstat %s: %w", path, err)
	}
	if got := fileid.Of(fi).ID; !fi.Mode().IsRegular() || got != want {
		_ = closeFile(f)
		return nil, fmt.Errorf("guard %s: inode %v, want %v: %w", path, got, want, fileid.ErrIdentityChanged)
	}
	return f, nil
}

func (g *Guard) checkHeader(check func([]byte) error) error {
	if check == nil {
		return nil
	}
	b := make([]byte, 100)
	n, err := g.main.ReadAt(b, 0)
	if err != nil && err != io.EOF {
		return fmt.Errorf("guard: read header of %s: %w", g.main.Name(), err)
	}
	return check(b[:n])
}

func refused(err error) error {
	if isLockConflict(err) {
		return fmt.Errorf("%w: %w", ErrGuardRefused, err)
	}
	return err
}

// IDs are the inodes the guard holds.
func (g *Guard) IDs() fileid.Family { return g.ids }

// WAL and SHM are the guard's read-only fds on the generation's -wal (nil
// when it had none) and -shm, for ReadAt only; the guard keeps owning them.
func (g *Guard) WAL() *os.File { return g.wal }
func (g *Guard) SHM() *os.File { return g.shm }

// GuardDup is a copy of a guard's fds that outlives the guard: the same
// open file descriptions, so the main's read lock stays while either is
// open.
type GuardDup struct {
	Path           string // the store's main, the key of SHM's close (store.CloseSHM)
	Main, WAL, SHM *os.File
}

// Dup duplicates the guard's fds (close-on-exec), for an incident that
// must keep the generation alive after the guard moves on. The caller
// closes them, under the same rule as Close.
func (g *Guard) Dup() (GuardDup, error) {
	d := GuardDup{Path: g.path}
	for _, p := range []struct {
		src *os.File
		dst **os.File
	}{{g.main, &d.Main}, {g.wal, &d.WAL}, {g.shm, &d.SHM}} {
		if p.src == nil {
			continue
		}
		f, err := dupFile(p.src)
		if err != nil {
			d.Close()
			return GuardDup{}, fmt.Errorf("guard: dup %s: %w", p.src.Name(), err)
		}
		*p.dst = f
	}
	return d, nil
}

// Close closes the copies that are open (the -shm's with store.CloseSHM).
func (d GuardDup) Close() {
	for _, f := range []*os.File{d.Main, d.WAL} {
		if f != nil {
			f.Close()
		}
	}
	store.CloseSHM(d.Path, d.SHM)
}

// Close releases both locks by closing the guard's fds. Like every
// close(2), that would also drop each POSIX lock this process holds on
// those inodes: the agent's SQLite connections take OFD locks on the main,
// but POSIX ones on the -shm, so the -shm's fd is closed with
// store.CloseSHM, which waits for the agent's connections on the store.
func (g *Guard) Close() error {
	var errs []error
	for _, f := range []*os.File{g.main, g.wal} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	errs = append(errs, store.CloseSHM(g.path, g.shm))
	g.main, g.wal, g.shm = nil, nil, nil
	return errors.Join(errs...)
}
