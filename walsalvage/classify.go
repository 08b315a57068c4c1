package walsalvage

import (
	"errors"
	"fmt"
)

// cellHeader is a cell with its record's serial types.
type cellHeader struct {
	cell  leafCell
	types []uint64
	err   error
}

// leaf salvages one table leaf page: it finds the layout that most of its
// records fit (a page holds one table's rows only), then decodes each
// fitting cell into a row. Cells that fit no layout, do not decode, or
// lack overflow pages are counted as losses of that table.
func (s *salvager) leaf(img []byte, pgno uint32) {
	s.rep.PageKinds.TableLeaf++
	cells, bad, err := tableLeafCells(img, pgno, s.info.usable)
	if err != nil {
		s.rep.LeafPages.Undecodable++
		s.rep.lose(Loss{Page: pgno, Cell: -1, Reason: err.Error()})
		return
	}
	hs := make([]cellHeader, len(cells))
	for i, c := range cells {
		hs[i] = s.header(c)
	}
	l, n := s.bestLayout(hs)
	if n == 0 {
		s.rep.LeafPages.Other++
		for _, h := range hs {
			if h.err == nil {
				if s.rep.OtherLeafFields == nil {
					s.rep.OtherLeafFields = map[int]int{}
				}
				s.rep.OtherLeafFields[len(h.types)]++
				break
			}
		}
		return
	}
	switch l.Table {
	case TableMessages:
		s.rep.LeafPages.Messages++
	case TableSessions:
		s.rep.LeafPages.Sessions++
	}
	s.rep.usedLayout(l.Table, l.Source)
	for _, b := range bad {
		s.rep.lose(Loss{Table: l.Table, Page: pgno, Cell: b.index, Reason: b.err.Error()})
	}
	frame := s.pages.newest[pgno]
	for _, h := range hs {
		if err := s.cellRow(l, h, pgno, frame); err != nil {
			s.rep.lose(Loss{Table: l.Table, Page: pgno, Cell: h.cell.index, RowID: h.cell.rowid, Reason: err.Error()})
		}
	}
}

// header decodes a cell's record header from its local part, or from the
// whole payload when the header itself spills into overflow pages.
func (s *salvager) header(c leafCell) cellHeader {
	types, _, err := recordHeader(c.local)
	if err != nil && c.overflow != 0 {
		p, perr := payload(c, s.pages, s.info.usable)
		if perr != nil {
			return cellHeader{cell: c, err: perr}
		}
		types, _, err = recordHeader(p)
	}
	return cellHeader{cell: c, types: types, err: err}
}

// bestLayout is the candidate layout the most records fit, the earlier
// (the WAL's own schema, then the main's, then built-in) on a tie.
func (s *salvager) bestLayout(hs []cellHeader) (layout, int) {
	var best layout
	bestN := 0
	for _, l := range s.layouts {
		n := 0
		for _, h := range hs {
			if h.err == nil && l.fits(h.types) {
				n++
			}
		}
		if n > bestN {
			best, bestN = l, n
		}
	}
	return best, bestN
}

// cellRow decodes one cell as a row of l and keeps it unless a newer
// image of the same rowid was already found.
func (s *salvager) cellRow(l layout, h cellHeader, pgno uint32, frame int) error {
	if h.err != nil {
		return h.err
	}
	if !l.fits(h.types) {
		return fmt.Errorf("record of %d fields does not fit the %s layout (%s) the rest of the page fits", len(h.types), l.Table, l.Source)
	}
	p, err := payload(h.cell, s.pages, s.info.usable)
	if err != nil {
		if errors.Is(err, errOverflowMissing) {
			return fmt.Errorf("%d-byte record spills into overflow pages: %w", h.cell.size, err)
		}
		return err
	}
	vals, err := decodeRecord(p, s.info.enc)
	if err != nil {
		return err
	}
	row := Row{RowID: h.cell.rowid, Values: l.row(h.cell.rowid, vals), Page: pgno, Frame: s.pages.position(frame), Layout: l.Source, order: frame}
	if old, ok := s.rows[l.Table][row.RowID]; ok {
		s.rep.Superseded++
		if old.order > row.order {
			return nil
		}
	}
	s.rows[l.Table][row.RowID] = row
	return nil
}
