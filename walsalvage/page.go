package walsalvage

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// B-tree page types (the first byte of the page header).
const (
	pageInteriorIndex = 0x02
	pageInteriorTable = 0x05
	pageLeafIndex     = 0x0a
	pageLeafTable     = 0x0d
)

// minUsable is the smallest usable page size SQLite allows; the spill
// rule's arithmetic needs it.
const minUsable = 480

// maxPayload bounds one record: SQLite's own limit (SQLITE_MAX_LENGTH)
// is a little under 1 GiB, so a larger size is damage.
const maxPayload = 1 << 30

var (
	errBadPage         = errors.New("page does not decode")
	errOverflowMissing = errors.New("overflow page not in the WAL")
)

// headerOffset is where the b-tree page header starts: page 1 has the
// 100-byte database header in front of it.
func headerOffset(pgno uint32) int {
	if pgno == 1 {
		return 100
	}
	return 0
}

// pageType is the b-tree type byte of page pgno's image, 0 when the image
// is too short to have one.
func pageType(img []byte, pgno uint32) byte {
	off := headerOffset(pgno)
	if off >= len(img) {
		return 0
	}
	return img[off]
}

// leafCell is one cell of a table b-tree leaf page.
type leafCell struct {
	index    int // position in the page's cell pointer array
	rowid    int64
	size     int64  // the whole payload's size
	local    []byte // the part stored on this page
	overflow uint32 // first overflow page, 0 when the payload is all local
}

// badCell is a cell that does not decode.
type badCell struct {
	index int
	err   error
}

// tableLeafCells decodes the cells of a table leaf page (type 0x0D) of
// usable size usable. A cell that does not decode is returned in bad with
// the reason, and the others are still decoded.
func tableLeafCells(img []byte, pgno uint32, usable int) (cells []leafCell, bad []badCell, err error) {
	hdr := headerOffset(pgno)
	if usable > len(img) || usable < minUsable {
		return nil, nil, fmt.Errorf("%w: page %d is %d bytes, usable %d", errBadPage, pgno, len(img), usable)
	}
	if img[hdr] != pageLeafTable {
		return nil, nil, fmt.Errorf("%w: page %d has type 0x%02x, not a table leaf", errBadPage, pgno, img[hdr])
	}
	n := int(binary.BigEndian.Uint16(img[hdr+3:]))
	ptrs := hdr + 8
	if ptrs+2*n > usable {
		return nil, nil, fmt.Errorf("%w: page %d claims %d cells, more than fit", errBadPage, pgno, n)
	}
	for i := range n {
		c, err := tableLeafCell(img[:usable], int(binary.BigEndian.Uint16(img[ptrs+2*i:])), ptrs+2*n, usable)
		if err != nil {
			bad = append(bad, badCell{index: i, err: err})
			continue
		}
		c.index = i
		cells = append(cells, c)
	}
	return cells, bad, nil
}

// tableLeafCell decodes the cell at off: payload size, rowid, the local
// part of the payload and the first overflow page number. The local size
// is SQLite's: all of it up to X = U-35, else K = M+((P-M)%(U-4)) when K
// fits in X, else M, with M = ((U-12)*32/255)-23.
func tableLeafCell(page []byte, off, minOff, usable int) (leafCell, error) {
	if off < minOff || off >= usable {
		return leafCell{}, fmt.Errorf("%w: cell offset %d outside [%d, %d)", errBadPage, off, minOff, usable)
	}
	p, n := varint(page[off:])
	if n == 0 {
		return leafCell{}, fmt.Errorf("%w: payload size runs off the page", errBadPage)
	}
	off += n
	rowid, n := varint(page[off:])
	if n == 0 {
		return leafCell{}, fmt.Errorf("%w: rowid runs off the page", errBadPage)
	}
	off += n
	if p > maxPayload {
		return leafCell{}, fmt.Errorf("%w: payload of %d bytes", errBadPage, p)
	}
	local := localSize(int64(p), usable)
	c := leafCell{rowid: int64(rowid), size: int64(p)}
	end := off + int(local)
	if local < int64(p) {
		end += 4
	}
	if end > usable {
		return leafCell{}, fmt.Errorf("%w: %d-byte local payload runs off the page", errBadPage, local)
	}
	c.local = page[off : off+int(local)]
	if local < int64(p) {
		c.overflow = binary.BigEndian.Uint32(page[off+int(local):])
		if c.overflow == 0 {
			return leafCell{}, fmt.Errorf("%w: %d-byte payload spills but names no overflow page", errBadPage, p)
		}
	}
	return c, nil
}

// localSize is how much of a table leaf cell's payload of p bytes is on
// the page itself, for usable size u.
func localSize(p int64, u int) int64 {
	x := int64(u - 35)
	if p <= x {
		return p
	}
	m := int64((u-12)*32/255 - 23)
	k := m + (p-m)%int64(u-4)
	if k <= x {
		return k
	}
	return m
}

// pager hands out the newest committed image of a page.
type pager interface {
	page(pgno uint32) ([]byte, bool, error)
	// count is how many distinct pages the pager has: no overflow chain
	// can be longer.
	count() int
}

// payload assembles the whole payload of c, following its overflow chain
// through pages, which must all be in the WAL. A chain longer than the
// payload needs, or that comes back on itself, is damage.
func payload(c leafCell, pages pager, usable int) ([]byte, error) {
	if c.overflow == 0 {
		return c.local, nil
	}
	// The size is checked against what the pager can hold before anything
	// is allocated for it: a damaged cell may claim a gigabyte.
	if usable < minUsable {
		return nil, fmt.Errorf("%w: usable page size %d", errBadPage, usable)
	}
	need := (c.size - int64(len(c.local)) + int64(usable-5)) / int64(usable-4)
	if need > int64(pages.count()) {
		return nil, fmt.Errorf("%w: page %d: the %d-byte payload needs %d overflow pages, the WAL has %d pages in all", errOverflowMissing, c.overflow, c.size, need, pages.count())
	}
	out := append([]byte{}, c.local...)
	seen := map[uint32]bool{}
	next := c.overflow
	for int64(len(out)) < c.size {
		if next == 0 {
			return nil, fmt.Errorf("%w: overflow chain ends %d bytes short", errBadPage, c.size-int64(len(out)))
		}
		if seen[next] {
			return nil, fmt.Errorf("%w: overflow chain loops at page %d", errBadPage, next)
		}
		seen[next] = true
		img, ok, err := pages.page(next)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: page %d", errOverflowMissing, next)
		}
		if len(img) < usable {
			return nil, fmt.Errorf("%w: overflow page %d is short", errBadPage, next)
		}
		take := min(int64(usable-4), c.size-int64(len(out)))
		out = append(out, img[4:4+take]...)
		next = binary.BigEndian.Uint32(img)
	}
	return out, nil
}

// childPages lists the children of a table interior page: each cell's
// left child, then the right-most pointer.
func childPages(img []byte, pgno uint32, usable int) ([]uint32, error) {
	hdr := headerOffset(pgno)
	if usable > len(img) || usable < minUsable || img[hdr] != pageInteriorTable {
		return nil, fmt.Errorf("%w: page %d is not a table interior page", errBadPage, pgno)
	}
	n := int(binary.BigEndian.Uint16(img[hdr+3:]))
	ptrs := hdr + 12
	if ptrs+2*n > usable {
		return nil, fmt.Errorf("%w: page %d claims %d cells, more than fit", errBadPage, pgno, n)
	}
	out := make([]uint32, 0, n+1)
	for i := range n {
		off := int(binary.BigEndian.Uint16(img[ptrs+2*i:]))
		if off < ptrs+2*n || off+4 > usable {
			return nil, fmt.Errorf("%w: page %d cell %d offset %d", errBadPage, pgno, i, off)
		}
		out = append(out, binary.BigEndian.Uint32(img[off:]))
	}
	return append(out, binary.BigEndian.Uint32(img[hdr+8:])), nil
}
