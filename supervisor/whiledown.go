package supervisor

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// What happened while no agent ran (docs/design.md §5, "Found at
// start"). A restore copied over the live main in place (cp, rsync
// --inplace) while agentd was stopped leaves its writers on a WAL built
// on pages that are gone, and no event says so: their next checkpoint
// corrupts the copy. So the first look at every store (and, for a store
// it could not inspect then, the first check that can) compares the WAL
// at the path with the main (store.CheckWALFit), and with the position
// the journal has from before the agent stopped; a WAL that does not fit
// opens a rewritten incident at once, its writers frozen, cut at that
// journaled position. A main renamed aside or replaced is found by the
// holder scan (its writers hold an inode no longer at the path) and
// classified by the same check; it gets the journaled cut too
// (openIncident). A fresh agent's scan knows a main renamed aside only
// by the journaled inode and birth (rememberAsideMain): its name is no
// role of the store, and a writer whose POSIX locks were cancelled holds
// no lock that names it. Where nothing can decide, status says so.

// downLook is a worker's state of that look.
type downLook struct {
	done  bool
	tries int // looks that could not read the store
	// pos is the position last journaled (notePosition skips a write
	// when nothing moved, or when it journaled one a moment ago).
	pos journal.WALPosition
}

// maxLookTries: a store whose WAL keeps moving under the read (a busy
// writer restarting it) is given up on after this many checks, with a
// warning in status.
const maxLookTries = 5

// storeFiles are fds on a store's main, -wal and -shm (nil when there
// is none), opened through the directory's handle.
type storeFiles struct {
	main, wal, shm  *os.File
	mainSt, walSt   fileid.State
	mainHdr         store.MainHeader
	mainHdrReadable bool
	mainPage1       uint64 // FNV-1a of page 1 (of its first 4 KiB without a header)
}

// openStoreFiles opens the store's files; ok is false when there is no
// main or no -wal (no live WAL to fit), err when the directory could not
// be read.
func (w *worker) openStoreFiles() (sf storeFiles, ok bool, err error) {
	h, err := w.st.OpenDir()
	if err != nil {
		return sf, false, err
	}
	defer h.Close()
	name := func(sfx string) string { return filepath.Base(w.st.Path) + sfx }
	if sf.main, err = h.OpenFile(name("")); err != nil {
		return sf, false, notMissing(err)
	}
	if sf.wal, err = h.OpenFile(name("-wal")); err != nil {
		sf.close(w.st.Path)
		return storeFiles{}, false, notMissing(err)
	}
	if sf.shm, err = h.OpenFile(name("-shm")); err != nil {
		sf.shm = nil // no wal-index: the frames are walked
	}
	for _, f := range []struct {
		f  *os.File
		st *fileid.State
	}{{sf.main, &sf.mainSt}, {sf.wal, &sf.walSt}} {
		fi, err := f.f.Stat()
		if err != nil {
			sf.close(w.st.Path)
			return storeFiles{}, false, fmt.Errorf("fstat %s: %w", f.f.Name(), err)
		}
		*f.st = fileid.Of(fi)
	}
	b := make([]byte, 100)
	if n, _ := sf.main.ReadAt(b, 0); n > 0 {
		if sf.mainHdr, err = store.ParseMainHeader(b[:n]); err == nil {
			sf.mainHdrReadable = true
		}
	}
	page := make([]byte, max(sf.mainHdr.PageSize, 4096))
	n, _ := sf.main.ReadAt(page, 0)
	sum := fnv.New64a()
	sum.Write(page[:n])
	sf.mainPage1 = sum.Sum64()
	return sf, true, nil
}

func notMissing(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func (sf storeFiles) close(mainPath string) {
	if sf.main != nil {
		sf.main.Close() // the agent's SQLite locks its mains with OFD locks: this close cancels none
	}
	if sf.wal != nil {
		sf.wal.Close()
	}
	if sf.shm != nil {
		_ = store.CloseSHM(mainPath, sf.shm) // a divert's read of this store may be open
	}
}

// fit is store.CheckWALFit on the files, looked at again (a few times)
// while a live writer moves the WAL under the read.
func (sf storeFiles) fit() (store.WALFit, error) {
	var err error
	deadline := time.Now().Add(2 * time.Second)
	for try := 0; try < 20 && time.Now().Before(deadline); try++ {
		// The WAL as long as it is now: a walk never chases the frames a
		// live writer appends meanwhile (a commit between this and the
		// wal-index read is a look again).
		fi, serr := sf.wal.Stat()
		if serr != nil {
			return store.WALFit{}, fmt.Errorf("fstat %s: %w", sf.wal.Name(), serr)
		}
		wal := io.NewSectionReader(sf.wal, 0, fi.Size())
		var fit store.WALFit
		if fit, err = store.CheckWALFit(sf.main, sf.mainSt.Size, wal, shmReader(sf.shm)); !errors.Is(err, store.ErrWALMoved) {
			return fit, err
		}
	}
	return store.WALFit{}, fmt.Errorf("look at %s: %w (a writer restarting it all the time); looked at again at the next check", sf.wal.Name(), err)
}

// shmReader keeps a nil *os.File from becoming a non-nil reader.
func shmReader(f *os.File) interface {
	ReadAt([]byte, int64) (int, error)
} {
	if f == nil {
		return nil
	}
	return f
}

// position is where the WAL of sf stands now, as the journal keeps it:
// the header's salts, and the wal-index's (or a walk's) last commit and
// backfill mark.
func (w *worker) position(sf storeFiles) (journal.WALPosition, error) {
	hb := make([]byte, store.WALHeaderSize)
	if n, _ := sf.wal.ReadAt(hb, 0); n < len(hb) {
		return journal.WALPosition{}, store.ErrNoWALCut
	}
	h, err := store.ParseWALHeader(hb)
	if err != nil || !h.Valid() {
		return journal.WALPosition{}, store.ErrNoWALCut
	}
	bl, err := store.ReadWALBacklog(sf.wal, shmReader(sf.shm))
	if err != nil {
		return journal.WALPosition{}, fmt.Errorf("read %s: %w", sf.wal.Name(), err)
	}
	return journal.WALPosition{Store: w.st.Path, Main: sf.mainSt.ID, MainSize: sf.mainSt.Size, MainCounter: sf.mainHdr.FileChangeCounter, MainPage1: sf.mainPage1,
		MainBirth: holders.FileBirth(sf.main),
		WAL:       sf.walSt.ID, Salt1: h.Salt1, Salt2: h.Salt2, Frame: bl.Committed, Backfilled: bl.Backfilled, At: time.Now()}, nil
}

// positionEvery is how often a check journals a store's position that
// keeps moving (a busy store moves at every check): an older position is
// a cut that replays more, never one that loses a row, and the stop
// journals every store's newest.
const positionEvery = 30 * time.Second

// notePosition journals where the store's WAL stands, when it moved
// since the last note: at each check and at shutdown. Not before the
// look at start is done: the journaled position is that look's
// evidence.
func (w *worker) notePosition() {
	if !w.down.done || time.Since(w.down.pos.At) < positionEvery {
		return
	}
	sf, ok, err := w.openStoreFiles()
	if err != nil || !ok {
		return
	}
	defer sf.close(w.st.Path)
	p, err := w.position(sf)
	if err != nil {
		if !errors.Is(err, store.ErrNoWALCut) {
			w.log.Debug("wal position not read", "err", err)
		}
		return
	}
	if p.SameAs(w.down.pos) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.a.journal.RecordWALPositions(ctx, p); err != nil {
		w.log.Warn("wal position not journaled", "err", err)
		return
	}
	w.down.pos = p
}

// notePositionsAtStop journals every stopped worker's position in one
// transaction, as the agent stops: the position a change made while it
// is down is cut at.
func (a *Agent) notePositionsAtStop() {
	var ps []journal.WALPosition
	for _, w := range a.allWorkers() {
		if !w.down.done {
			continue
		}
		sf, ok, err := w.openStoreFiles()
		if err != nil || !ok {
			continue
		}
		p, err := w.position(sf)
		sf.close(w.st.Path)
		if err == nil && !p.SameAs(w.down.pos) {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.journal.RecordWALPositions(ctx, ps...); err != nil {
		a.log.Warn("wal positions not journaled at stop; a restore made while agentd is down is cut by time", "err", err)
	}
}
