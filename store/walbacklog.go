package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// WALBacklog says how much of a WAL is committed and how much of that a
// checkpoint has already copied into the main file: whether losing the
// WAL would lose committed rows.
type WALBacklog struct {
	// Committed is the number of the WAL's last frame that ends a
	// transaction (0: no committed frame for the header's salts).
	Committed uint32
	// Backfilled is how many frames the wal-index says a checkpoint has
	// copied into the main file; meaningful only when IndexOK.
	Backfilled uint32
	// IndexOK: the -shm held a valid wal-index header for this WAL
	// (both copies equal, checksum right, the WAL's salts), so Committed
	// and Backfilled come from it.
	IndexOK bool
}

// Pending reports whether the WAL holds committed frames that may not be
// in the main file yet. Without a trustworthy wal-index every committed
// frame counts as pending: only SQLite's own record can say a frame was
// checkpointed.
func (b WALBacklog) Pending() bool {
	if b.Committed == 0 {
		return false
	}
	return !b.IndexOK || b.Backfilled < b.Committed
}

func (b WALBacklog) String() string {
	if !b.IndexOK {
		return fmt.Sprintf("%d committed frames, wal-index unusable", b.Committed)
	}
	return fmt.Sprintf("%d committed frames, %d backfilled", b.Committed, b.Backfilled)
}

// Wal-index layout (SQLite's wal.c): two copies of a 48-byte header, then
// the checkpoint info whose first word is nBackfill. Fields are in the
// host's byte order; the salts are the WAL header's bytes as they are.
const (
	walIndexHdrSize   = 48
	walIndexVersion   = 3007000
	walIndexBackfill  = 2 * walIndexHdrSize
	walIndexReadBytes = walIndexBackfill + 4
)

// ReadWALBacklog reads a WAL and the -shm beside it (nil when there is
// none) through fds, never through SQLite, so it works on unlinked files
// the agent pinned. A WAL shorter than its header, with a bad magic or an
// invalid header has nothing committed. The wal-index is used when it
// describes this WAL; otherwise the WAL's frames are walked with their
// checksums, as SQLite's recovery does.
func ReadWALBacklog(wal, shm io.ReaderAt) (WALBacklog, error) {
	hb := make([]byte, WALHeaderSize)
	if n, err := wal.ReadAt(hb, 0); n < WALHeaderSize {
		if err != nil && !errors.Is(err, io.EOF) {
			return WALBacklog{}, fmt.Errorf("read wal header: %w", err)
		}
		return WALBacklog{}, nil
	}
	h, err := ParseWALHeader(hb)
	if err != nil || !h.Valid() {
		return WALBacklog{}, nil
	}
	if shm != nil {
		if b, ok := readWALIndex(shm, hb); ok {
			return b, nil
		}
	}
	last, err := lastCommitFrame(wal, h)
	if err != nil {
		return WALBacklog{}, err
	}
	return WALBacklog{Committed: last}, nil
}

// readWALIndex decodes the wal-index header if it is valid and belongs to
// the WAL whose header is walHdr.
func readWALIndex(shm io.ReaderAt, walHdr []byte) (WALBacklog, bool) {
	b := make([]byte, walIndexReadBytes)
	if n, _ := shm.ReadAt(b, 0); n < len(b) {
		return WALBacklog{}, false
	}
	h1, h2 := b[:walIndexHdrSize], b[walIndexHdrSize:2*walIndexHdrSize]
	ne := binary.NativeEndian
	if !bytes.Equal(h1, h2) || ne.Uint32(h1[0:]) != walIndexVersion || h1[12] != 1 {
		return WALBacklog{}, false
	}
	s1, s2 := WALChecksum(!hostLittleEndian(), 0, 0, h1[:40])
	if s1 != ne.Uint32(h1[40:]) || s2 != ne.Uint32(h1[44:]) {
		return WALBacklog{}, false
	}
	if !bytes.Equal(h1[32:40], walHdr[16:24]) {
		return WALBacklog{}, false // the index describes an earlier WAL
	}
	return WALBacklog{Committed: ne.Uint32(h1[16:]), Backfilled: ne.Uint32(b[walIndexBackfill:]), IndexOK: true}, true
}

func hostLittleEndian() bool { return binary.NativeEndian.Uint16([]byte{1, 0}) == 1 }

// lastCommitFrame walks the frames that carry h's salts and a checksum
// chained from the header's, and returns the number of the last one that
// ends a transaction: what SQLite's recovery would accept.
func lastCommitFrame(wal io.ReaderAt, h WALHeader) (uint32, error) {
	frame := make([]byte, WALFrameHeaderSize+int(h.PageSize))
	s1, s2 := h.Checksum1, h.Checksum2
	var last uint32
	for i := uint32(0); ; i++ {
		off := int64(WALHeaderSize) + int64(i)*int64(len(frame))
		if n, err := wal.ReadAt(frame, off); n < len(frame) {
			if err != nil && !errors.Is(err, io.EOF) {
				return 0, fmt.Errorf("read wal frame %d: %w", i+1, err)
			}
			return last, nil
		}
		fh, _ := ParseWALFrameHeader(frame)
		if !fh.Belongs(h) {
			return last, nil
		}
		s1, s2 = WALChecksum(h.BigEndianChecksums, s1, s2, frame[:8])
		s1, s2 = WALChecksum(h.BigEndianChecksums, s1, s2, frame[WALFrameHeaderSize:])
		if s1 != fh.Checksum1 || s2 != fh.Checksum2 {
			return last, nil
		}
		if fh.IsCommit() {
			last = i + 1
		}
	}
}
