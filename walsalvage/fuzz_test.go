package walsalvage

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
)

// fuzzPager holds one page under several numbers, so overflow chains of a
// fuzzed cell can point at it, at themselves, or nowhere.
type fuzzPager map[uint32][]byte

func (p fuzzPager) page(pgno uint32) ([]byte, bool, error) { b, ok := p[pgno]; return b, ok, nil }
func (p fuzzPager) count() int                             { return len(p) }

// FuzzDecodePage feeds arbitrary bytes to the page and record decoders
// (as page 1, with its 100-byte header, and as page 2) and to the CREATE
// TABLE parser. Nothing may panic, a payload must come out exactly as
// long as its cell says, and no allocation may exceed what the pages
// hold: a cell claiming a huge payload is refused before anything is
// allocated for it. Seeds: every committed page of the golden WALs.
func FuzzDecodePage(f *testing.F) {
	for _, c := range []string{"main-gone", "overflow", "v31-mismatched-main"} {
		wal := readGz(f, filepath.Join(goldenDir, c, walFile))
		w, err := ReadWAL(context.Background(), bytes.NewReader(wal), int64(len(wal)))
		if err != nil {
			f.Fatal(err)
		}
		for pg, i := range w.Newest(w.Committed) {
			img, err := w.ReadPage(bytes.NewReader(wal), i)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(img, pg == 1)
		}
	}
	layouts := builtinLayouts()
	f.Fuzz(func(t *testing.T, img []byte, first bool) {
		if len(img) > 1<<16 {
			img = img[:1<<16]
		}
		pgno := uint32(2)
		if first {
			pgno = 1
		}
		pages := fuzzPager{2: img, 3: img, 7: img}
		usable := len(img)
		cells, _, err := tableLeafCells(img, pgno, usable)
		if err == nil {
			for _, c := range cells {
				p, err := payload(c, pages, usable)
				if err != nil {
					continue
				}
				if int64(len(p)) != c.size {
					t.Fatalf("payload of %d bytes for a %d-byte cell", len(p), c.size)
				}
				types, _, herr := recordHeader(p)
				vals, derr := decodeRecord(p, encUTF8)
				if derr == nil && (herr != nil || len(vals) != len(types)) {
					t.Fatalf("record decodes to %d values, header has %d (%v)", len(vals), len(types), herr)
				}
				for _, l := range layouts {
					if derr == nil && l.fits(types) {
						_ = l.row(c.rowid, vals)
					}
				}
			}
		}
		_, _ = childPages(img, pgno, usable)
		_, _, _, _ = parseCreateTable(string(img))
	})
}
