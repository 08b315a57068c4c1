package supervisor

import (
	"time"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/store"
)

// A process that wrote the live main and was gone before the agent could
// read its fds may have been a connection checkpointing as it closed, or
// a tool rewriting the main in place (dd conv=notrunc 1<>, a few
// milliseconds for a small store). With frames in the -wal, the incident
// opens either way; with an empty -wal there is nothing for the new
// content to be paired with, so a checkpoint was assumed and the frozen
// writers thawed. But a connection that read since the WAL was last reset
// trusts its page cache for as long as the wal-index header in the -shm
// is unchanged, and a rewrite of the main changes no byte of it: that
// connection then commits pages of the old content on top of the new.
//
// A checkpoint that wrote the main changes the wal-index: it moves the
// backfill mark (nBackfill) past the frames it copied, and one that
// emptied the WAL restarted the header (new salts, mxFrame 0). So each
// check notes the header and the mark (shmMark); a write with an empty
// -wal and both unchanged since a check that ran before it was no
// checkpoint, and the rewritten incident opens.

const (
	// walIndexHdrBytes is one copy of the wal-index header (WalIndexHdr);
	// SQLite writes the second copy first and this one last.
	walIndexHdrBytes = 48
	// walIndexBackfillOff is nBackfill in WalCkptInfo, after both copies.
	walIndexBackfillOff = 2 * walIndexHdrBytes
	// shmMarkMargin: a note taken within this of the write's event may
	// have been taken after the write itself (the event is read a moment
	// later), so it is no baseline.
	shmMarkMargin = 50 * time.Millisecond
)

// shmMark is the -shm's wal-index header and backfill mark, as read at
// at (after at: a checkpoint before at is in it).
type shmMark struct {
	at  time.Time
	id  fileid.ID
	hdr [walIndexHdrBytes + 4]byte
}

// readSHMMark reads the store's -shm through the directory's handle; ok
// false when there is none or it is shorter than the header.
func (w *worker) readSHMMark() (shmMark, bool) {
	m := shmMark{at: time.Now()}
	f, err := w.st.OpenFile("-shm")
	if err != nil {
		return m, false
	}
	defer store.CloseSHM(w.st.Path, f) // a divert's read of this store may be open
	fi, err := f.Stat()
	if err != nil {
		return m, false
	}
	m.id = fileid.Of(fi).ID
	b := make([]byte, walIndexBackfillOff+4)
	if n, _ := f.ReadAt(b, 0); n < len(b) {
		return m, false
	}
	copy(m.hdr[:walIndexHdrBytes], b[:walIndexHdrBytes])
	copy(m.hdr[walIndexHdrBytes:], b[walIndexBackfillOff:])
	return m, true
}

// noteSHM keeps the -shm's mark as the worker's check sees it, and the
// one before (a note taken between a write and its event is no baseline
// for that write).
//
// Only a writer named by fanotify can be gone before it is looked at
// (the unprivileged judge confirms what it reports), so without it
// nothing is read.
func (w *worker) noteSHM() {
	if mw := w.a.rw.mw; mw == nil || !mw.Attributed() || w.watched.IsZero() {
		return
	}
	m, ok := w.readSHMMark()
	w.rws.mu.Lock()
	defer w.rws.mu.Unlock()
	if !ok {
		w.rws.shm = [2]shmMark{}
		return
	}
	w.rws.shm = [2]shmMark{m, w.rws.shm[0]}
}

// shmUnchangedSince reports whether the -shm's wal-index header and
// backfill mark are what a check noted before the write seen at
// (by shmMarkMargin): no checkpoint has written the main since.
func (w *worker) shmUnchangedSince(at time.Time) bool {
	w.rws.mu.Lock()
	marks := w.rws.shm
	w.rws.mu.Unlock()
	var base *shmMark
	for i := range marks {
		if !marks[i].at.IsZero() && marks[i].at.Before(at.Add(-shmMarkMargin)) {
			base = &marks[i]
			break
		}
	}
	if base == nil {
		return false
	}
	now, ok := w.readSHMMark()
	return ok && now.id == base.id && now.hdr == base.hdr
}
