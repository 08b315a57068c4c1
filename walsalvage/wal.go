package walsalvage

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/stateguard/stateguard/store"
)

// ErrInvalidWAL means the header is one SQLite would not use (bad
// checksum, unknown version, impossible page size): the WAL holds no
// committed frames, because every frame's checksum chains from it.
var ErrInvalidWAL = errors.New("invalid WAL header")

// Frame is one frame that belongs to the WAL: its salts are the header's
// and its checksum continues the chain.
type Frame struct {
	Page uint32
	// CommitSize is the database size in pages after this frame's commit;
	// 0 for a frame that is not the last of a transaction.
	CommitSize uint32
	// Offset is where the frame's page image starts in the file.
	Offset int64
	// Checksum is the running checksum after this frame, as the wal-index
	// header records it for its last frame.
	Checksum [2]uint32
}

// WAL is what a walk of a -wal file found.
type WAL struct {
	Header store.WALHeader
	// Frames are the valid frames in file order, committed or not.
	Frames []Frame
	// Committed is how many leading frames end in a commit frame: the
	// frames SQLite's recovery would make part of the database. Frames
	// after them are an uncommitted (or torn) tail.
	Committed int
	// Stop says why the walk ended: "end of file", or the first frame
	// that is torn, has another generation's salts or a wrong checksum.
	Stop string
	// Previous is the previous generation's frames found beyond, nil when
	// there are none or ReadPrevious was not called. They are not part of
	// the WAL as SQLite reads it: only Salvage uses them, beneath the
	// WAL's own.
	Previous *Previous
	end      int64 // offset of the first frame the walk did not take
}

// ReadWAL walks the frames of a WAL of size bytes as SQLite's recovery
// does: from the header on, each frame must carry the header's salts, a
// non-zero page number and a checksum that continues the chain from the
// header's; the walk stops at the first frame that does not. It fails
// only when r is not a WAL (short, wrong magic: store's errors) or the
// header is invalid (ErrInvalidWAL).
func ReadWAL(ctx context.Context, r io.ReaderAt, size int64) (*WAL, error) {
	hb := make([]byte, store.WALHeaderSize)
	if n, err := r.ReadAt(hb, 0); n < len(hb) {
		if err == nil || errors.Is(err, io.EOF) {
			err = store.ErrShortHeader
		}
		return nil, fmt.Errorf("read wal header: %d of %d bytes: %w", n, len(hb), err)
	}
	h, err := store.ParseWALHeader(hb)
	if err != nil {
		return nil, fmt.Errorf("read wal header: %w", err)
	}
	if !h.Valid() {
		why := "checksum mismatch"
		switch {
		case h.Version != store.WALVersion:
			why = fmt.Sprintf("version %d", h.Version)
		case h.ChecksumValid:
			why = fmt.Sprintf("page size %d", h.PageSize)
		}
		return nil, fmt.Errorf("read wal header: %s: %w (SQLite ignores such a WAL: it holds no committed frames)", why, ErrInvalidWAL)
	}
	w := &WAL{Header: h}
	ps := int64(h.PageSize)
	buf := make([]byte, store.WALFrameHeaderSize+ps)
	s1, s2 := h.Checksum1, h.Checksum2
	var off int64
	for off = int64(store.WALHeaderSize); ; off += int64(len(buf)) {
		if len(w.Frames)%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		n := len(w.Frames) + 1
		if off+int64(len(buf)) > size {
			if off == size {
				w.Stop = "end of file"
			} else {
				w.Stop = fmt.Sprintf("frame %d torn: %d of %d bytes", n, size-off, len(buf))
			}
			break
		}
		if got, err := r.ReadAt(buf, off); got < len(buf) {
			return nil, fmt.Errorf("read wal frame %d at offset %d: %w", n, off, err)
		}
		fh, _ := store.ParseWALFrameHeader(buf)
		if !fh.Belongs(h) {
			w.Stop = fmt.Sprintf("frame %d has salts %08x %08x, not the header's: left from before the WAL was restarted", n, fh.Salt1, fh.Salt2)
			break
		}
		if fh.PageNumber == 0 {
			w.Stop = fmt.Sprintf("frame %d has page number 0", n)
			break
		}
		c1, c2 := store.WALChecksum(h.BigEndianChecksums, s1, s2, buf[:8])
		c1, c2 = store.WALChecksum(h.BigEndianChecksums, c1, c2, buf[store.WALFrameHeaderSize:])
		if c1 != fh.Checksum1 || c2 != fh.Checksum2 {
			w.Stop = fmt.Sprintf("frame %d checksum mismatch (torn or overwritten)", n)
			break
		}
		s1, s2 = c1, c2
		w.Frames = append(w.Frames, Frame{Page: fh.PageNumber, CommitSize: fh.CommitSize,
			Offset: off + store.WALFrameHeaderSize, Checksum: [2]uint32{c1, c2}})
		if fh.IsCommit() {
			w.Committed = len(w.Frames)
		}
	}
	w.end = off
	return w, nil
}

// ReadPrevious looks for the previous generation's frames beyond the
// WAL's own (see Previous) and sets w.Previous when there are some. It
// reads the rest of the file, so only Salvage and the callers that must
// know do it; ReadWAL alone reads the WAL as SQLite does.
func (w *WAL) ReadPrevious(ctx context.Context, r io.ReaderAt, size int64) error {
	if w.end+store.WALFrameBytes(w.Header.PageSize) > size {
		return nil
	}
	p, err := readPrevious(ctx, r, size, w.end, w.Header)
	if err != nil {
		return err
	}
	w.Previous = p
	return nil
}

// PageSize is the WAL's page size.
func (w *WAL) PageSize() int { return int(w.Header.PageSize) }

// DatabasePages is the database size in pages after the last commit, 0
// when no frame is committed.
func (w *WAL) DatabasePages() uint32 {
	if w.Committed == 0 {
		return 0
	}
	return w.Frames[w.Committed-1].CommitSize
}

// images lists the committed frames Salvage reads, oldest first: the
// previous generation's committed frames (their pages as the restart
// found the database), then the WAL's own, whose images supersede them.
func (w *WAL) images() []Frame {
	out := w.Frames[:w.Committed:w.Committed]
	if p := w.Previous; p != nil && p.Committed > 0 {
		out = append(append([]Frame{}, p.Frames[:p.Committed]...), out...)
	}
	return out
}

// imagePages is the database size after the last commit Salvage reads:
// the WAL's own last commit, else the previous generation's.
func (w *WAL) imagePages() uint32 {
	if n := w.DatabasePages(); n > 0 || w.Previous == nil || w.Previous.Committed == 0 {
		return n
	}
	return w.Previous.Frames[w.Previous.Committed-1].CommitSize
}

// Newest maps each page to the index (into Frames) of its newest frame
// among the first n frames, as a reader whose snapshot ends at frame n
// sees the database.
func (w *WAL) Newest(n int) map[uint32]int {
	n = min(n, len(w.Frames))
	m := make(map[uint32]int)
	for i := range n {
		m[w.Frames[i].Page] = i
	}
	return m
}

// ReadPage reads the image of frame i.
func (w *WAL) ReadPage(r io.ReaderAt, i int) ([]byte, error) {
	b := make([]byte, w.Header.PageSize)
	if n, err := r.ReadAt(b, w.Frames[i].Offset); n < len(b) {
		return nil, fmt.Errorf("read wal frame %d (page %d): %w", i+1, w.Frames[i].Page, err)
	}
	return b, nil
}
