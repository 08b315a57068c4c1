package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// WALFit is what a look at a store's main, -wal and -shm (through fds,
// never SQLite) says about whether the live WAL was built on the main at
// the path: the check agentd runs at start, when an in-place rewrite of
// the main (cp, rsync --inplace) may have happened while it was down.
type WALFit struct {
	// Cut is where the WAL's committed frames end (Frame 0: none, nothing
	// to check).
	Cut WALCut
	// Backlog is the same position with the wal-index's backfill mark.
	Backlog WALBacklog
	// Mismatch names the evidence that the WAL does not fit the main
	// ("" when every check passed or none could run).
	Mismatch string
	// Checks lists the checks that could run (backfill, page-1 counter,
	// page count, page size): none means the look could not decide.
	Checks []string
	// Page1InWAL: the main's page 1 is, byte for byte, one of the WAL's
	// committed page-1 images (a checkpoint copied it).
	Page1InWAL bool
}

// ErrWALMoved: the WAL or its wal-index changed while it was read (a
// live writer committed or restarted it); the caller looks again.
var ErrWALMoved = errors.New("the wal moved while it was read")

// walFrame is one committed frame of a WAL as CheckWALFit uses it.
type walFrame struct {
	page   uint32
	off    int64 // of the frame header
	dbSize uint32
}

// CheckWALFit compares a WAL with the main it should belong to. A WAL
// holds page images built on the main as it was when the WAL last
// restarted, plus what checkpoints have copied since, so these hold for
// a WAL that belongs to its main, and a rewrite of the main breaks them:
//   - pages whose newest committed image is in a frame a checkpoint
//     already copied (up to the wal-index's nBackfill) equal the main's;
//   - SQLite writes page 1's change counter as the one it last read plus
//     one, so the WAL's first page-1 image carries the main's counter or
//     one more (nothing of page 1 copied yet), or the main's page 1 is
//     one of those images (copied);
//   - every page of the last commit's database that no frame holds is in
//     the main, which has the WAL's page size.
//
// mainSize is the main's size from the same fd's fstat.
func CheckWALFit(main io.ReaderAt, mainSize int64, wal, shm io.ReaderAt) (WALFit, error) {
	hb := make([]byte, WALHeaderSize)
	if n, err := wal.ReadAt(hb, 0); n < WALHeaderSize {
		if err != nil && !errors.Is(err, io.EOF) {
			return WALFit{}, fmt.Errorf("read wal header: %w", err)
		}
		return WALFit{}, nil
	}
	h, err := ParseWALHeader(hb)
	if err != nil || !h.Valid() {
		return WALFit{}, nil
	}
	var bl WALBacklog
	if shm != nil {
		bl, _ = readWALIndex(shm, hb)
	}
	frames, err := committedFrames(wal, h, bl)
	if err != nil {
		return WALFit{}, err
	}
	fit := WALFit{Cut: WALCut{Frame: uint32(len(frames)), Salt1: h.Salt1, Salt2: h.Salt2}, Backlog: bl}
	if !bl.IndexOK {
		fit.Backlog = WALBacklog{Committed: fit.Cut.Frame}
	}
	if len(frames) == 0 {
		return fit, nil
	}
	fc := fitCheck{main: main, mainSize: mainSize, wal: wal, h: h, frames: frames, bl: fit.Backlog}
	fit.Mismatch, fit.Checks, err = fc.run()
	if err != nil {
		return WALFit{}, err
	}
	if fit.Page1InWAL, err = fc.page1InWAL(0); err != nil {
		return WALFit{}, err
	}
	// A writer that restarted the WAL while it was read overwrote the
	// frames read, and a checkpoint that copied frames meanwhile wrote
	// the main under the comparison. Frames committed since are no
	// matter: the ones up to the index's mxFrame do not change.
	hb2 := make([]byte, WALHeaderSize)
	if _, err := wal.ReadAt(hb2, 0); err != nil || !bytes.Equal(hb, hb2) {
		return WALFit{}, ErrWALMoved
	}
	if shm != nil && bl.IndexOK {
		if bl2, ok := readWALIndex(shm, hb); !ok || bl2.Backfilled != bl.Backfilled {
			return WALFit{}, ErrWALMoved
		}
	}
	return fit, nil
}

// committedFrames walks the frames that carry h's salts with a chained
// checksum, up to the last commit frame (and, with a wal-index, to its
// mxFrame: frames past it are a commit under way).
func committedFrames(wal io.ReaderAt, h WALHeader, bl WALBacklog) ([]walFrame, error) {
	buf := make([]byte, WALFrameHeaderSize+int(h.PageSize))
	s1, s2 := h.Checksum1, h.Checksum2
	var out []walFrame
	last := 0
	for i := uint32(0); !bl.IndexOK || i < bl.Committed; i++ {
		off := int64(WALHeaderSize) + int64(i)*int64(len(buf))
		if n, err := wal.ReadAt(buf, off); n < len(buf) {
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("read wal frame %d: %w", i+1, err)
			}
			break
		}
		fh, _ := ParseWALFrameHeader(buf)
		if !fh.Belongs(h) {
			break
		}
		s1, s2 = WALChecksum(h.BigEndianChecksums, s1, s2, buf[:8])
		s1, s2 = WALChecksum(h.BigEndianChecksums, s1, s2, buf[WALFrameHeaderSize:])
		if s1 != fh.Checksum1 || s2 != fh.Checksum2 {
			break
		}
		out = append(out, walFrame{page: fh.PageNumber, off: off, dbSize: fh.CommitSize})
		if fh.IsCommit() {
			last = len(out)
		}
	}
	if bl.IndexOK && uint32(last) != bl.Committed {
		return nil, ErrWALMoved // the index names frames the walk did not find
	}
	return out[:last], nil
}

// pendingByte is the offset of SQLite's lock bytes: the page that holds
// it is never written, in the main or the WAL.
const pendingByte = 0x40000000

// fitCheck holds what the checks of CheckWALFit share.
type fitCheck struct {
	main     io.ReaderAt
	mainSize int64
	wal      io.ReaderAt
	h        WALHeader
	frames   []walFrame
	bl       WALBacklog
}

// run returns the first mismatch found ("" for none) and the checks run.
func (c *fitCheck) run() (string, []string, error) {
	var checks []string
	var mh MainHeader
	if c.mainSize > 0 {
		b := make([]byte, 100)
		n, _ := c.main.ReadAt(b, 0)
		var err error
		if mh, err = ParseMainHeader(b[:n]); err != nil {
			return fmt.Sprintf("the main's header is no SQLite header (%v) while the WAL holds %d committed frames", err, len(c.frames)), []string{"header"}, nil
		}
		checks = append(checks, "page size")
		if mh.PageSize != c.h.PageSize {
			return fmt.Sprintf("the main's page size is %d, the WAL's %d", mh.PageSize, c.h.PageSize), checks, nil
		}
	}
	checks = append(checks, "page count")
	if why := c.pageCount(); why != "" {
		return why, checks, nil
	}
	if why, ran, err := c.page1(mh); err != nil || why != "" {
		return why, append(checks, "page-1 counter"), err
	} else if ran {
		checks = append(checks, "page-1 counter")
	}
	if c.bl.IndexOK && c.bl.Backfilled > 0 {
		checks = append(checks, "backfill")
		why, err := c.backfilled()
		return why, checks, err
	}
	return "", checks, nil
}

// pageCount: every page of the last commit's database that no frame
// holds must be in the main.
func (c *fitCheck) pageCount() string {
	inWAL := map[uint32]bool{}
	for _, f := range c.frames {
		inWAL[f.page] = true
	}
	size := c.frames[len(c.frames)-1].dbSize
	have := uint32(c.mainSize / int64(c.h.PageSize))
	pending := uint32(pendingByte/int64(c.h.PageSize)) + 1 // never written
	for p := have + 1; p <= size; p++ {
		if !inWAL[p] && p != pending {
			return fmt.Sprintf("the main has %d pages; the WAL's last commit (frame %d) makes a database of %d, and page %d is in no frame",
				have, len(c.frames), size, p)
		}
	}
	return ""
}

// page1 checks the main's page 1 against the WAL's page-1 images; ran
// is false when the WAL has none. With no image copied yet (none up to
// nBackfill), the first image's change counter is the main's or one
// more; otherwise (or besides) the main's page 1 is, byte for byte,
// the newest copied image or a later one (a checkpoint under way or
// interrupted past nBackfill). A counter merely equal to some image's
// is no proof: a backup taken a few commits back has one.
func (c *fitCheck) page1(mh MainHeader) (why string, ran bool, err error) {
	type img struct {
		idx     int
		counter uint32
	}
	var imgs []img
	b := make([]byte, 4)
	copied := -1 // the newest image a checkpoint has copied, by index in imgs
	for i, f := range c.frames {
		if f.page != 1 {
			continue
		}
		if _, err := c.wal.ReadAt(b, f.off+WALFrameHeaderSize+24); err != nil {
			return "", false, fmt.Errorf("read wal frame %d: %w", i+1, err)
		}
		if c.bl.IndexOK && uint32(i) < c.bl.Backfilled {
			copied = len(imgs)
		}
		imgs = append(imgs, img{i, binary.BigEndian.Uint32(b)})
	}
	if len(imgs) == 0 {
		return "", false, nil
	}
	// A connection writes the counter of the page 1 it last read plus
	// one, and keeps its cached page 1 across its own commits and a WAL
	// restart: the first image after a restart repeats the counter the
	// checkpoint copied, unless another connection wrote page 1 last.
	mc := mh.FileChangeCounter // an empty main: 0, as SQLite reads it
	if copied < 0 && (imgs[0].counter == mc || imgs[0].counter == mc+1) {
		return "", true, nil
	}
	from := 0
	if copied >= 0 {
		from = imgs[copied].idx
	}
	if ok, err := c.page1InWAL(from); err != nil || ok {
		return "", ok, err
	}
	if copied >= 0 {
		return fmt.Sprintf("the main's page 1 (change counter %d) is none of the WAL's page-1 images from frame %d on, which a checkpoint copied into it (%d frames backfilled)",
			mc, imgs[copied].idx+1, c.bl.Backfilled), true, nil
	}
	return fmt.Sprintf("the main's change counter is %d and its page 1 none of the WAL's %d page-1 images, the first written over counter %d",
		mc, len(imgs), imgs[0].counter-1), true, nil
}

// page1InWAL reports whether the main's page 1 is, byte for byte, the
// image of page 1 in a committed frame from index from on.
func (c *fitCheck) page1InWAL(from int) (bool, error) {
	ps := int(c.h.PageSize)
	cur, im := make([]byte, ps), make([]byte, ps)
	if n, _ := c.main.ReadAt(cur, 0); n < ps {
		return false, nil
	}
	for i, f := range c.frames[from:] {
		if f.page != 1 {
			continue
		}
		if _, err := c.wal.ReadAt(im, f.off+WALFrameHeaderSize); err != nil {
			return false, fmt.Errorf("read wal frame %d: %w", from+i+1, err)
		}
		if bytes.Equal(cur, im) {
			return true, nil
		}
	}
	return false, nil
}

// backfilled compares the main with every page whose newest image is in
// a frame a checkpoint has copied (up to nBackfill), within the last
// commit's database.
func (c *fitCheck) backfilled() (string, error) {
	newest := map[uint32]int{}
	for i, f := range c.frames {
		newest[f.page] = i
	}
	size := c.frames[len(c.frames)-1].dbSize
	ps := int(c.h.PageSize)
	img, cur := make([]byte, ps), make([]byte, ps)
	for p, i := range newest {
		if uint32(i) >= c.bl.Backfilled || p > size {
			continue
		}
		f := c.frames[i]
		if _, err := c.wal.ReadAt(img, f.off+WALFrameHeaderSize); err != nil {
			return "", fmt.Errorf("read wal frame %d: %w", i+1, err)
		}
		n, _ := c.main.ReadAt(cur, int64(p-1)*int64(ps))
		if n < ps || !bytes.Equal(img, cur) {
			return fmt.Sprintf("page %d of the main differs from frame %d, which a checkpoint copied into it (%d frames backfilled)",
				p, i+1, c.bl.Backfilled), nil
		}
	}
	return "", nil
}
