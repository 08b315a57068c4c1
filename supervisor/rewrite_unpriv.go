package supervisor

import (
	"context"
	"encoding/binary"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/modwatch"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/walsalvage"
)

// Without CAP_SYS_ADMIN (agentd as a user) modwatch reports writes into a
// main by inotify, with no writer. A store's own connections write its
// main only in checkpoints, which copy page images committed to the WAL:
// so the main's header (change counter, page count) after a write either
// is the one seen before (pages other than page 1 copied) or is the
// page-1 image of a commit in the WAL at the path, with a change counter
// that never goes back. A write that leaves anything else (a header cut
// short or gone: cp's O_TRUNC; an older counter: a backup restored; a
// newer one no commit wrote, while no checkpoint holds the store's
// checkpoint lock) is an in-place rewrite. Every holder that can write
// the store is frozen (no pid says who the rewriter is: nobody is
// spared), and the rewritten incident opens as at root, after the first
// write rather than before it.

// mainHeaderSeen is the main's header and size, and the WAL's salts,
// that a first watch, a handled rewrite or an explained write left.
type mainHeaderSeen struct {
	id      fileid.ID
	counter uint32
	pages   uint32
	size    int64
	wal     walMark
}

// walMark tells WAL generations apart: a checkpoint that reset the WAL
// gave it new salts.
type walMark struct{ salt1, salt2, seq uint32 }

// noteMainHeader records the header of the main at the path; the
// unprivileged judge compares writes with it.
func (w *worker) noteMainHeader() {
	if w.a.rw.mw == nil || w.a.rw.mw.Attributed() {
		return
	}
	h, st, err := readMainHeader(w.st)
	if err != nil {
		return
	}
	mark, _, _ := walPage1Counter(w.st)
	w.setLastHdr(st, h, mark)
}

func (w *worker) setLastHdr(st fileid.State, h store.MainHeader, mark walMark) {
	w.rws.mu.Lock()
	w.rws.lastHdr = mainHeaderSeen{id: st.ID, counter: h.FileChangeCounter, pages: h.DatabaseSize, size: st.Size, wal: mark}
	w.rws.mu.Unlock()
}

// unattributedWrite judges a write into the main whose writer is not
// known (modwatch without pids).
func (w *worker) unattributedWrite(ev modwatch.Event) {
	if ev.Op == modwatch.CloseWrite {
		if w.rewriting(0) {
			w.kick(ev.At) // its incident waits for the main to be quiet
		}
		return
	}
	if w.rewriting(0) || w.intended() {
		return
	}
	w.rws.inspecting.Lock()
	defer w.rws.inspecting.Unlock()
	why := w.unexplainedPrivately(ev.ID)
	if why == "" {
		return
	}
	known, _ := w.a.cache.Known(w.target)
	frozen := w.freezeWriters(known.Holders, 0, ev.At)
	w.pendRewrite(rewriteSeen{at: ev.At, frozen: frozen, confirmed: true}) // writer pid 0: none named
	w.log.Warn("the live main was written as no connection of the store writes it", "event", EventRewriteDetected,
		"pid", 0, "frozen", len(frozen), "confirmed", true, "evidence", why)
	// Recorded and kicked before the yield: a replay that registers after
	// it finds the pending rewrite (replayMayStart) and the queued check
	// (checkFirst), which opens the incident.
	w.kick(ev.At)
	w.yieldReplay("its main was written as no connection writes it")
}

// unexplainedPrivately is unexplained in a private file table
// (store.InPrivateFDTable): it runs on modwatch's goroutine, beside the
// store's worker, whose own SQLite connection (a replay's) may be open,
// and its close of the -shm in the agent's file table would drop that
// connection's wal-index locks (POSIX locks even with OFD locking on).
// Only when no private table can be had (unshare failed: out of memory)
// is it judged in the agent's own.
func (w *worker) unexplainedPrivately(id fileid.ID) string {
	var why string
	if err := store.InPrivateFDTable(func() { why = w.unexplained(id) }); err != nil {
		return w.unexplained(id)
	}
	return why
}

// unexplained says why the main's state after a write is no checkpoint's
// ("" when it may be one). Checkpoints only move the header forward, cut
// the file only when its page count drops, and copy page 1 from a commit
// in the WAL; a WAL with new salts has been checkpointed and reset since,
// which explains any forward header.
func (w *worker) unexplained(id fileid.ID) string {
	w.rws.mu.Lock()
	last := w.rws.lastHdr
	w.rws.mu.Unlock()
	if last.id != id {
		return "" // not the main the last check saw: that check's change
	}
	h, st, err := readMainHeader(w.st)
	switch {
	case st.Exists && st.ID != id:
		return "" // replaced since: the check of that change has it
	case err != nil:
		return "header unreadable (cut short): " + err.Error()
	case h.FileChangeCounter < last.counter:
		return "change counter went back"
	case st.Size < last.size && h.DatabaseSize >= last.pages:
		return "file cut short"
	case h.FileChangeCounter == last.counter && h.DatabaseSize == last.pages:
		if st.Size > last.size {
			w.setLastHdr(st, h, last.wal)
		}
		return ""
	}
	mark, max, found := walPage1Counter(w.st)
	if (found && h.FileChangeCounter <= max) || mark != last.wal {
		w.setLastHdr(st, h, mark)
		return "" // a checkpoint copied a committed page 1
	}
	if checkpointing(w.st) {
		return "" // under way: its next write is judged again
	}
	return "header changed without a WAL commit"
}

// readMainHeader reads the 100-byte header of the store's main through
// its directory's handle (store.Store.OpenFile: no symlink, no FIFO, the
// directory discovery recorded). The State is the opened fd's, so the
// header and the identity it is judged with are of one file.
func readMainHeader(s store.Store) (store.MainHeader, fileid.State, error) {
	f, err := s.OpenFile("")
	if err != nil {
		return store.MainHeader{}, fileid.Missing(), os.ErrNotExist
	}
	defer f.Close() // the agent's SQLite uses OFD locks: this close cancels none
	fi, err := f.Stat()
	if err != nil {
		return store.MainHeader{}, fileid.Missing(), err
	}
	st := fileid.Of(fi)
	b := make([]byte, 100)
	n, _ := f.ReadAt(b, 0)
	h, err := store.ParseMainHeader(b[:n])
	return h, st, err
}

// walPage1Counter reads the store's WAL (through the directory's handle):
// its mark (zero when there is none) and the highest change counter of a
// committed page-1 image in it.
func walPage1Counter(s store.Store) (walMark, uint32, bool) {
	f, err := s.OpenFile("-wal")
	if err != nil {
		return walMark{}, 0, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return walMark{}, 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	wal, err := walsalvage.ReadWAL(ctx, f, fi.Size())
	if err != nil {
		return walMark{}, 0, false
	}
	mark := walMark{wal.Header.Salt1, wal.Header.Salt2, wal.Header.CheckpointSeq}
	var max uint32
	found := false
	b := make([]byte, 4)
	for _, fr := range wal.Frames[:wal.Committed] {
		if fr.Page != 1 {
			continue
		}
		if _, err := f.ReadAt(b, fr.Offset+24); err == nil {
			max, found = maxU32(max, binary.BigEndian.Uint32(b)), true
		}
	}
	return mark, max, found
}

func maxU32(a, b uint32) uint32 {
	if a > b {
		return a
	}
	return b
}

// walCkptLockByte is SQLite's checkpoint lock in a -shm: the wal-index
// locks start at byte 120, WAL_CKPT_LOCK is the second.
const walCkptLockByte = 121

// checkpointing reports whether some process holds the store's
// checkpoint lock (one F_GETLK, which sets no lock) in its -shm, opened
// through the directory's handle.
func checkpointing(s store.Store) bool {
	f, err := s.OpenFile("-shm")
	if err != nil {
		return false
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: walCkptLockByte, Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil {
		return false
	}
	return lk.Type != unix.F_UNLCK
}
