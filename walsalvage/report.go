package walsalvage

import (
	"slices"
)

// maxLosses bounds the losses listed one by one; past it they are only
// counted (LossesNotListed), so a badly damaged WAL cannot grow the
// report without bound.
const maxLosses = 1000

// Report says what a salvage read, recovered and could not recover.
type Report struct {
	PageSize           int       `json:"page_size"`
	BigEndianChecksums bool      `json:"big_endian_checksums"`
	Salts              [2]uint32 `json:"salts"`
	CheckpointSeq      uint32    `json:"checkpoint_seq"`
	// Frames are the valid frames read, FramesCommitted those up to the
	// last commit frame (the rest is a tail SQLite would not use either).
	Frames          int    `json:"frames"`
	FramesCommitted int    `json:"frames_committed"`
	Stop            string `json:"stop"`
	// Pages is how many distinct pages the committed frames hold, and
	// DatabasePages the database size the last commit recorded.
	Pages         int    `json:"pages"`
	DatabasePages uint32 `json:"database_pages"`
	// Previous is the previous generation found beyond the WAL's frames
	// (WAL.Previous); Pages and DatabasePages count its committed images
	// too.
	Previous *PreviousReport `json:"previous,omitempty"`
	// DatabaseHeader says where the usable page size and text encoding
	// came from: "wal" (page 1), "main", or "assumed" (UTF-8, no reserved
	// bytes, as Hermes creates its stores).
	DatabaseHeader string     `json:"database_header"`
	PageKinds      PageKinds  `json:"page_kinds"`
	LeafPages      LeafCounts `json:"leaf_pages"`
	// OtherLeafFields counts the other leaf pages by the field count of
	// their first record: FTS shadow tables have 2, sqlite_master 5. A
	// wide record here is a table whose layout was not known.
	OtherLeafFields map[int]int `json:"other_leaf_fields,omitempty"`
	// Layouts are the layouts rows were read with, per table.
	Layouts       map[string][]string `json:"layouts"`
	Rows          TableCounts         `json:"rows"`
	Unrecoverable TableCounts         `json:"unrecoverable"`
	// Superseded are older copies of a row also found in a newer page
	// image (a row moved by a page split or merge); the newest is kept.
	Superseded      int      `json:"superseded"`
	Losses          []Loss   `json:"losses,omitempty"`
	LossesNotListed int      `json:"losses_not_listed,omitempty"`
	SessionsSeen    []string `json:"sessions_seen"`
	Warnings        []string `json:"warnings,omitempty"`
}

// PreviousReport says what of the previous generation was read.
type PreviousReport struct {
	Salts           [2]uint32 `json:"salts"`
	FirstFrame      int       `json:"first_frame"`
	FirstVerified   bool      `json:"first_verified"`
	Frames          int       `json:"frames"`
	FramesCommitted int       `json:"frames_committed"`
	Stop            string    `json:"stop"`
}

// PageKinds counts the committed pages that are not table leaves.
type PageKinds struct {
	TableLeaf       int `json:"table_leaf"`
	InteriorTable   int `json:"interior_table"`
	Index           int `json:"index"`
	OverflowOrOther int `json:"overflow_or_other"`
	Freelist        int `json:"freelist"`   // on the freelist after the last commit
	BeyondEnd       int `json:"beyond_end"` // past the database's size (truncated away)
}

// LeafCounts counts the table leaf pages by what they were found to be.
type LeafCounts struct {
	Messages    int `json:"messages"`
	Sessions    int `json:"sessions"`
	Other       int `json:"other"`       // no cell fits messages or sessions
	Undecodable int `json:"undecodable"` // the page header does not decode
}

// TableCounts is a count per salvaged table.
type TableCounts struct {
	Messages int `json:"messages"`
	Sessions int `json:"sessions"`
}

func (c *TableCounts) add(table string, n int) {
	switch table {
	case TableMessages:
		c.Messages += n
	case TableSessions:
		c.Sessions += n
	}
}

// Loss is one thing that could not be recovered: a row (Cell >= 0) or a
// whole page (Cell -1). Table is empty when it is not known.
type Loss struct {
	Table  string `json:"table,omitempty"`
	Page   uint32 `json:"page"`
	Cell   int    `json:"cell"`
	RowID  int64  `json:"rowid,omitempty"`
	Reason string `json:"reason"`
}

func (r *Report) init(w *WAL) {
	r.PageSize = w.PageSize()
	r.Salts = [2]uint32{w.Header.Salt1, w.Header.Salt2}
	r.BigEndianChecksums = w.Header.BigEndianChecksums
	r.CheckpointSeq = w.Header.CheckpointSeq
	r.Frames, r.FramesCommitted, r.Stop = len(w.Frames), w.Committed, w.Stop
	r.Pages = len(newWALPager(nil, w).newest)
	r.DatabasePages = w.imagePages()
	if p := w.Previous; p != nil {
		r.Previous = &PreviousReport{Salts: p.Salts, FirstFrame: p.First, FirstVerified: p.FirstVerified,
			Frames: len(p.Frames), FramesCommitted: p.Committed, Stop: p.Stop}
	}
	r.Layouts = map[string][]string{}
}

func (r *Report) warn(ws ...string) { r.Warnings = append(r.Warnings, ws...) }

func (r *Report) lose(l Loss) {
	r.Unrecoverable.add(l.Table, boolInt(l.Cell >= 0))
	if len(r.Losses) >= maxLosses {
		r.LossesNotListed++
		return
	}
	r.Losses = append(r.Losses, l)
}

func (r *Report) usedLayout(table, source string) {
	if !slices.Contains(r.Layouts[table], source) {
		r.Layouts[table] = append(r.Layouts[table], source)
		slices.Sort(r.Layouts[table])
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// finish counts the rows and the sessions seen: every session a salvaged
// message names, and every salvaged session row.
func (r *Report) finish(res *Result) {
	r.Rows = TableCounts{Messages: len(res.Messages), Sessions: len(res.Sessions)}
	seen := map[string]bool{}
	for _, m := range res.Messages {
		if sid, ok := m.Text("session_id"); ok {
			seen[sid] = true
		}
	}
	for _, s := range res.Sessions {
		if id, ok := s.Text("id"); ok {
			seen[id] = true
		}
	}
	r.SessionsSeen = make([]string, 0, len(seen))
	for sid := range seen {
		r.SessionsSeen = append(r.SessionsSeen, sid)
	}
	slices.Sort(r.SessionsSeen)
}
