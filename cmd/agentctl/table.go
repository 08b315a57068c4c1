package main

import (
	"io"
	"strings"
	"unicode/utf8"

	"github.com/stateguard/stateguard/internal/termsafe"
)

// table renders rows as aligned text columns under an upper-case header,
// the way ps and systemctl list things. The last column is never padded,
// so a long command line does not drag trailing blanks along.
type table struct {
	indent string
	header []string
	rows   [][]string
}

func newTable(indent string, header ...string) *table {
	return &table{indent: indent, header: header}
}

// row adds one row; missing cells are blank and extra cells are kept.
func (t *table) row(cells ...string) {
	t.rows = append(t.rows, cells)
}

func (t *table) write(w io.Writer) error {
	n := len(t.header)
	for _, r := range t.rows {
		n = max(n, len(r))
	}
	width := make([]int, n)
	measure := func(r []string) {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(cleanCell(c)))
		}
	}
	if len(t.header) > 0 {
		measure(t.header)
	}
	for _, r := range t.rows {
		measure(r)
	}
	var b strings.Builder
	line := func(r []string) {
		b.WriteString(t.indent)
		last := len(r) - 1
		for last >= 0 && r[last] == "" {
			last--
		}
		for i := 0; i <= last; i++ {
			c := cleanCell(r[i])
			b.WriteString(c)
			if i < last {
				b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)+2))
			}
		}
		b.WriteByte('\n')
	}
	if len(t.header) > 0 {
		line(t.header)
	}
	for _, r := range t.rows {
		line(r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cleanCell keeps a cell on one line and harmless on a terminal: a
// command line, a profile name or an error quoting a file name is another
// user's text (termsafe.String escapes C0, C1 and invalid UTF-8).
func cleanCell(s string) string { return termsafe.String(s) }
