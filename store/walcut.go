package store

import (
	"errors"
	"fmt"
	"io"
)

// WALCut is a position in one WAL: the frames up to and including Frame
// were committed when it was read, and Salt1/Salt2 name the WAL (its
// header's salts change whenever SQLite restarts it from frame 1). A
// replaced store's incident reads it from the orphan's wal-index the
// moment the change is seen: whatever the orphan commits after it was
// written after the replacement, whatever its rows' timestamps say.
type WALCut struct {
	Frame uint32 `json:"frame"`
	Salt1 uint32 `json:"salt1"`
	Salt2 uint32 `json:"salt2"`
}

func (c WALCut) String() string {
	return fmt.Sprintf("frame %d of wal %08x-%08x", c.Frame, c.Salt1, c.Salt2)
}

// ErrNoWALCut: the WAL has no valid header, so there is no position to
// read (an empty or never-written -wal); the caller falls back to time.
var ErrNoWALCut = errors.New("no wal position: the -wal has no valid header")

// ReadWALCut reads where a WAL's committed frames end now, through fds
// (pinned or the guard's), never through SQLite: the wal-index's mxFrame
// when the -shm describes this WAL, else the last commit frame a walk of
// the frames finds.
func ReadWALCut(wal, shm io.ReaderAt) (WALCut, error) {
	hb := make([]byte, WALHeaderSize)
	if n, err := wal.ReadAt(hb, 0); n < WALHeaderSize {
		if err != nil && !errors.Is(err, io.EOF) {
			return WALCut{}, fmt.Errorf("read wal header: %w", err)
		}
		return WALCut{}, ErrNoWALCut
	}
	h, err := ParseWALHeader(hb)
	if err != nil || !h.Valid() {
		return WALCut{}, ErrNoWALCut
	}
	b, err := ReadWALBacklog(wal, shm)
	if err != nil {
		return WALCut{}, err
	}
	return WALCut{Frame: b.Committed, Salt1: h.Salt1, Salt2: h.Salt2}, nil
}

// WALFrameBytes is the size of one frame of a WAL with this page size.
func WALFrameBytes(pageSize uint32) int64 { return int64(WALFrameHeaderSize) + int64(pageSize) }
