package walsalvage

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/stateguard/stateguard/store"
)

// Previous is what is left of the WAL's previous generation beyond the
// frames of the current one. When SQLite restarts a WAL (the first write
// after a checkpoint that copied every frame into the main) it writes a
// new header at offset 0, with salt-1 one more than the old one's and a
// new random salt-2, and then its frames over the old ones from the
// start; the old frames it has not yet overwritten stay in the file with
// the old salts. Their content is in the main the checkpoint wrote, and
// only there: when that main is overwritten too (cp of a backup), these
// frames are the last copy. See docs/walsalvage.md for what of them can be
// verified.
type Previous struct {
	Salts [2]uint32
	// First is the file position (1-based frame number) of the first
	// frame with the previous salts.
	First int
	// Frames are the verified frames of the run, in file order; Committed
	// how many leading ones end in a commit frame.
	Frames    []Frame
	Committed int
	// FirstVerified: the run starts at frame 1 and its checksum chains
	// from the previous header as it is rebuilt from the current one (the
	// same magic, version and page size, the previous salts, checkpoint
	// sequence one less). Else the first frame's own checksum is only the
	// chain's start: the frame itself is not used.
	FirstVerified bool
	Stop          string
}

// readPrevious looks past the end of the current generation's frames
// (off: the first frame that does not belong) for the previous
// generation's. Frames that carry the current salts but failed the walk
// (a frame of the current generation torn by a writer stopped mid-commit)
// are passed over; the first frame with other salts must have the
// previous generation's (salt-1 one less than the header's), else there
// is no previous generation to read: frames of any older generation are
// not the database as the restart found it.
func readPrevious(ctx context.Context, r io.ReaderAt, size, off int64, h store.WALHeader) (*Previous, error) {
	ps := int64(h.PageSize)
	fb := store.WALFrameHeaderSize + ps
	buf := make([]byte, fb)
	var p *Previous
	var s1, s2 uint32
	for ; off+fb <= size; off += fb {
		pos := int((off-store.WALHeaderSize)/fb) + 1
		if pos%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if got, err := r.ReadAt(buf, off); got < len(buf) {
			return nil, fmt.Errorf("read wal frame %d at offset %d: %w", pos, off, err)
		}
		fh, _ := store.ParseWALFrameHeader(buf)
		if p == nil {
			if fh.Belongs(h) {
				continue // the current generation's torn or stale frame
			}
			if fh.Salt1+1 != h.Salt1 {
				return nil, nil
			}
			p = &Previous{Salts: [2]uint32{fh.Salt1, fh.Salt2}, First: pos}
			if pos == 1 {
				s1, s2 = previousHeaderChecksum(h, fh)
				p.FirstVerified = p.verify(h, buf, fh, &s1, &s2, off)
				if p.FirstVerified {
					continue
				}
			}
			s1, s2 = fh.Checksum1, fh.Checksum2
			continue
		}
		if fh.Salt1 != p.Salts[0] || fh.Salt2 != p.Salts[1] {
			p.Stop = fmt.Sprintf("frame %d has salts %08x %08x", pos, fh.Salt1, fh.Salt2)
			return p, nil
		}
		if !p.verify(h, buf, fh, &s1, &s2, off) {
			p.Stop = fmt.Sprintf("frame %d checksum mismatch or page number 0", pos)
			return p, nil
		}
	}
	if p != nil {
		p.Stop = "end of file"
	}
	return p, nil
}

// verify checks one frame against the running checksum and, if it
// continues the chain, appends it.
func (p *Previous) verify(h store.WALHeader, buf []byte, fh store.WALFrameHeader, s1, s2 *uint32, off int64) bool {
	if fh.PageNumber == 0 {
		return false
	}
	c1, c2 := store.WALChecksum(h.BigEndianChecksums, *s1, *s2, buf[:8])
	c1, c2 = store.WALChecksum(h.BigEndianChecksums, c1, c2, buf[store.WALFrameHeaderSize:])
	if c1 != fh.Checksum1 || c2 != fh.Checksum2 {
		return false
	}
	*s1, *s2 = c1, c2
	p.Frames = append(p.Frames, Frame{Page: fh.PageNumber, CommitSize: fh.CommitSize,
		Offset: off + store.WALFrameHeaderSize, Checksum: [2]uint32{c1, c2}})
	if fh.IsCommit() {
		p.Committed = len(p.Frames)
	}
	return true
}

// previousHeaderChecksum is the checksum of the header SQLite wrote when
// it started the previous generation, as far as it can be rebuilt: SQLite
// writes the same magic, version and page size each time, and the
// writing connection's checkpoint sequence, which its restart increments.
func previousHeaderChecksum(h store.WALHeader, fh store.WALFrameHeader) (uint32, uint32) {
	b := make([]byte, 24)
	be := binary.BigEndian
	be.PutUint32(b[0:], h.Magic)
	be.PutUint32(b[4:], h.Version)
	be.PutUint32(b[8:], h.PageSize)
	be.PutUint32(b[12:], h.CheckpointSeq-1)
	be.PutUint32(b[16:], fh.Salt1)
	be.PutUint32(b[20:], fh.Salt2)
	return store.WALChecksum(h.BigEndianChecksums, 0, 0, b)
}
