package walsalvage

import (
	"fmt"
	"io"

	"github.com/stateguard/stateguard/store"
)

// dbInfo is what the database header on page 1 says about every page.
type dbInfo struct {
	pageSize int
	usable   int // page size less the reserved bytes at each page's end
	enc      textEncoding
	freelist uint32 // first freelist trunk page
	source   string // "wal", "main" or "assumed"
}

func parseDBInfo(b []byte, source string) (dbInfo, error) {
	h, err := store.ParseMainHeader(b)
	if err != nil {
		return dbInfo{}, err
	}
	if int(h.PageSize)-int(h.ReservedBytes) < minUsable {
		return dbInfo{}, fmt.Errorf("database header: %d reserved bytes leave less than %d usable of a %d-byte page", h.ReservedBytes, minUsable, h.PageSize)
	}
	enc := textEncoding(h.TextEncoding)
	if enc != encUTF16LE && enc != encUTF16BE {
		enc = encUTF8
	}
	return dbInfo{pageSize: int(h.PageSize), usable: int(h.PageSize) - int(h.ReservedBytes),
		enc: enc, freelist: h.FreelistTrunk, source: source}, nil
}

// walPager serves the newest committed image of each page of a WAL.
type walPager struct {
	r        io.ReaderAt
	pageSize int
	frames   []Frame        // the committed frames read, oldest first (WAL.images)
	newest   map[uint32]int // page → index into frames of its newest image
}

func newWALPager(r io.ReaderAt, w *WAL) *walPager {
	p := &walPager{r: r, pageSize: w.PageSize(), frames: w.images(), newest: map[uint32]int{}}
	for i, f := range p.frames {
		p.newest[f.Page] = i
	}
	return p
}

// position is the file position (1-based frame number) of frames[i].
func (p *walPager) position(i int) int {
	return int((p.frames[i].Offset-store.WALHeaderSize)/store.WALFrameBytes(uint32(p.pageSize))) + 1
}

func (p *walPager) page(pgno uint32) ([]byte, bool, error) {
	i, ok := p.newest[pgno]
	if !ok {
		return nil, false, nil
	}
	b := make([]byte, p.pageSize)
	if n, err := p.r.ReadAt(b, p.frames[i].Offset); n < len(b) {
		return nil, false, fmt.Errorf("read wal page %d at offset %d: %w", pgno, p.frames[i].Offset, err)
	}
	return b, true, nil
}

func (p *walPager) count() int { return len(p.newest) }

// mainPager serves the pages of a main database file.
type mainPager struct {
	r        io.ReaderAt
	size     int64
	pageSize int
}

func (p *mainPager) page(pgno uint32) ([]byte, bool, error) {
	off := int64(pgno-1) * int64(p.pageSize)
	if pgno == 0 || off+int64(p.pageSize) > p.size {
		return nil, false, nil
	}
	b := make([]byte, p.pageSize)
	if n, err := p.r.ReadAt(b, off); n < len(b) {
		return nil, false, fmt.Errorf("read main page %d: %w", pgno, err)
	}
	return b, true, nil
}

func (p *mainPager) count() int { return int(p.size / int64(p.pageSize)) }

// schemaLayouts reads the sqlite_master table (rooted at page 1) through
// pages and returns the layouts of messages and sessions it declares.
// Pages it cannot reach or decode are skipped and said in the warnings:
// what is found is still used, and the tables not found fall back to
// other sources.
func schemaLayouts(pages pager, info dbInfo, source string) (layouts []layout, warnings []string) {
	const maxSchemaPages = 10000
	seen := map[uint32]bool{}
	todo := []uint32{1}
	for len(todo) > 0 && len(seen) < maxSchemaPages {
		pgno := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[pgno] {
			continue
		}
		seen[pgno] = true
		img, ok, err := pages.page(pgno)
		if err != nil || !ok {
			warnings = append(warnings, fmt.Sprintf("schema (%s): page %d of sqlite_master is not available", source, pgno))
			continue
		}
		switch pageType(img, pgno) {
		case pageInteriorTable:
			kids, err := childPages(img, pgno, info.usable)
			if err != nil {
				warnings = append(warnings, fmt.Sprintf("schema (%s): %v", source, err))
			}
			todo = append(todo, kids...)
		case pageLeafTable:
			ls, ws := schemaLeaf(img, pgno, pages, info, source)
			layouts = append(layouts, ls...)
			warnings = append(warnings, ws...)
		default:
			warnings = append(warnings, fmt.Sprintf("schema (%s): page %d is not a table b-tree page", source, pgno))
		}
	}
	return layouts, warnings
}

func schemaLeaf(img []byte, pgno uint32, pages pager, info dbInfo, source string) (layouts []layout, warnings []string) {
	cells, bad, err := tableLeafCells(img, pgno, info.usable)
	if err != nil {
		return nil, []string{fmt.Sprintf("schema (%s): %v", source, err)}
	}
	for _, b := range bad {
		warnings = append(warnings, fmt.Sprintf("schema (%s): page %d cell %d: %v", source, pgno, b.index, b.err))
	}
	for _, c := range cells {
		p, err := payload(c, pages, info.usable)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("schema (%s): page %d cell %d: %v", source, pgno, c.index, err))
			continue
		}
		vals, err := decodeRecord(p, info.enc)
		// type, name, tbl_name, rootpage, sql
		if err != nil || len(vals) != 5 || vals[0].Kind != Text || vals[0].Text != "table" || vals[4].Kind != Text {
			continue
		}
		name := vals[1].Text
		if name != TableMessages && name != TableSessions {
			continue
		}
		_, cols, withoutRowid, err := parseCreateTable(vals[4].Text)
		if err == nil && withoutRowid {
			err = fmt.Errorf("table %s is WITHOUT ROWID", name)
		}
		var l layout
		if err == nil {
			l, err = newLayout(name, source, cols)
		}
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("schema (%s): %v", source, err))
			continue
		}
		layouts = append(layouts, l)
	}
	return layouts, warnings
}
