package walsalvage

import (
	"context"
	"fmt"
	"io"
	"slices"
)

// Options are what else is known besides the WAL. The zero value works:
// the WAL alone, with the built-in Hermes layouts.
type Options struct {
	// Main is a main database file, or only its 100-byte header (Hermes
	// keeps state.db.header when the main was too big to capture), of
	// MainSize bytes. It may be another database than the one the WAL was
	// built on: its schema is one more candidate layout, checked against
	// the records like any other, and its header is used only when page 1
	// is not in the WAL and the page sizes agree. Its pages are never
	// taken for the WAL's.
	Main     io.ReaderAt
	MainSize int64
}

// Row is one salvaged row.
type Row struct {
	RowID int64 `json:"rowid"`
	// Values maps column name to the value as SQLite stored it. Columns a
	// record predates (added later by ALTER TABLE) are absent.
	Values map[string]Value `json:"values"`
	Page   uint32           `json:"page"` // the page it was read from
	// Frame is that page's frame: its 1-based position in the file,
	// whether it is the WAL's own or the previous generation's.
	Frame  int    `json:"frame"`
	Layout string `json:"layout"` // the layout it was read with, as Report.Layouts names it
	order  int    // oldest first over WAL.images: which of two copies is newer
}

// Text returns a TEXT column's value; ok is false for NULL, another
// class or a missing column.
func (r Row) Text(col string) (string, bool) {
	v, ok := r.Values[col]
	if !ok || v.Kind != Text {
		return "", false
	}
	return v.Text, true
}

// Result is a salvage: the rows, by table in rowid order, and the report.
type Result struct {
	Messages []Row  `json:"messages"`
	Sessions []Row  `json:"sessions"`
	Report   Report `json:"report"`
}

// Salvage recovers the rows of messages and sessions from the newest
// committed page images of the WAL in r (size bytes). It fails only when r
// is not a usable WAL (see ReadWAL) or ctx ends; damage inside is counted
// in the report.
func Salvage(ctx context.Context, r io.ReaderAt, size int64, opts Options) (*Result, error) {
	w, err := ReadWAL(ctx, r, size)
	if err != nil {
		return nil, err
	}
	if err := w.ReadPrevious(ctx, r, size); err != nil {
		return nil, err
	}
	s := &salvager{w: w, pages: newWALPager(r, w)}
	s.rep.init(w)
	s.info = s.databaseInfo(opts)
	s.layouts = s.candidateLayouts(opts)
	s.freed = s.freelist()
	if err := s.scan(ctx); err != nil {
		return nil, err
	}
	return s.result(), nil
}

type salvager struct {
	w       *WAL
	pages   *walPager
	info    dbInfo
	layouts []layout
	freed   map[uint32]bool // nil: the freelist is not known
	rep     Report
	rows    map[string]map[int64]Row // table → rowid → newest row
}

// databaseInfo takes the page-1 header from the WAL, else from a main of
// the same page size, else assumes Hermes' (UTF-8, no reserved bytes).
func (s *salvager) databaseInfo(opts Options) dbInfo {
	ps := s.w.PageSize()
	if img, ok, err := s.pages.page(1); err == nil && ok {
		if info, err := parseDBInfo(img, "wal"); err == nil && info.pageSize == ps {
			s.rep.DatabaseHeader = "wal"
			return info
		}
		s.rep.warn("page 1 in the WAL has no valid database header")
	}
	if opts.Main != nil {
		b := make([]byte, 100)
		if n, _ := opts.Main.ReadAt(b, 0); n == len(b) {
			info, err := parseDBInfo(b, "main")
			switch {
			case err != nil:
				s.rep.warn(fmt.Sprintf("main file header not used: %v", err))
			case info.pageSize != ps:
				s.rep.warn(fmt.Sprintf("main file header not used: page size %d, the WAL's is %d (another database)", info.pageSize, ps))
			default:
				info.freelist = 0 // the main's freelist is not the WAL's
				s.rep.DatabaseHeader = "main"
				return info
			}
		}
	}
	s.rep.DatabaseHeader = "assumed"
	return dbInfo{pageSize: ps, usable: ps, enc: encUTF8, source: "assumed"}
}

// candidateLayouts lists every layout to try, the WAL's own schema first,
// then the main's, then the built-in ones.
func (s *salvager) candidateLayouts(opts Options) []layout {
	var out []layout
	if _, ok := s.pages.newest[1]; ok {
		ls, ws := schemaLayouts(s.pages, s.info, "wal")
		out = append(out, ls...)
		s.rep.warn(ws...)
	}
	if opts.Main != nil && opts.MainSize >= 512 {
		b := make([]byte, 100)
		if n, _ := opts.Main.ReadAt(b, 0); n == len(b) {
			if info, err := parseDBInfo(b, "main"); err == nil && opts.MainSize >= int64(info.pageSize) {
				ls, ws := schemaLayouts(&mainPager{r: opts.Main, size: opts.MainSize, pageSize: info.pageSize}, info, "main")
				out = append(out, ls...)
				s.rep.warn(ws...)
			}
		}
	}
	return append(out, builtinLayouts()...)
}

// freelist lists the pages on the freelist after the last commit: their
// newest image in the WAL, if any, is what they held before being freed.
// It is known only when page 1 and every trunk page are in the WAL.
func (s *salvager) freelist() map[uint32]bool {
	if s.info.source != "wal" {
		s.rep.warn("freelist unknown (page 1 is not in the WAL): a page freed since its last image is not told apart")
		return nil
	}
	freed := map[uint32]bool{}
	for trunk := s.info.freelist; trunk != 0; {
		if freed[trunk] {
			s.rep.warn(fmt.Sprintf("freelist loops at page %d", trunk))
			break
		}
		freed[trunk] = true
		img, ok, err := s.pages.page(trunk)
		if err != nil || !ok || len(img) < 8 {
			s.rep.warn(fmt.Sprintf("freelist trunk page %d is not in the WAL: the freelist is only partly known", trunk))
			break
		}
		n := int(be32(img[4:]))
		for i := 0; i < n && 8+4*i+4 <= s.info.usable; i++ {
			freed[be32(img[8+4*i:])] = true
		}
		trunk = be32(img)
	}
	return freed
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// scan looks at every page of the committed frames once, in page order.
func (s *salvager) scan(ctx context.Context) error {
	s.rows = map[string]map[int64]Row{TableMessages: {}, TableSessions: {}}
	pgnos := make([]uint32, 0, len(s.pages.newest))
	for p := range s.pages.newest {
		pgnos = append(pgnos, p)
	}
	slices.Sort(pgnos)
	dbPages := s.w.imagePages()
	for i, pgno := range pgnos {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		switch {
		case pgno > dbPages:
			s.rep.PageKinds.BeyondEnd++
			continue
		case s.freed[pgno]:
			s.rep.PageKinds.Freelist++
			continue
		}
		img, _, err := s.pages.page(pgno)
		if err != nil {
			return err
		}
		switch pageType(img, pgno) {
		case pageLeafTable:
			s.leaf(img, pgno)
		case pageInteriorTable:
			s.rep.PageKinds.InteriorTable++
		case pageLeafIndex, pageInteriorIndex:
			s.rep.PageKinds.Index++
		default:
			s.rep.PageKinds.OverflowOrOther++
		}
	}
	return nil
}

func (s *salvager) result() *Result {
	res := &Result{Report: s.rep}
	for _, t := range []string{TableMessages, TableSessions} {
		rows := make([]Row, 0, len(s.rows[t]))
		for _, r := range s.rows[t] {
			rows = append(rows, r)
		}
		slices.SortFunc(rows, func(a, b Row) int { return cmpInt64(a.RowID, b.RowID) })
		if t == TableMessages {
			res.Messages = rows
		} else {
			res.Sessions = rows
		}
	}
	res.Report.finish(res)
	return res
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
