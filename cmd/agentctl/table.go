package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
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

// cleanCell keeps a cell on one line: a command line or an error from a
// file name may carry control characters that would break the columns or
// the terminal.
func cleanCell(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isControl(r) {
			fmt.Fprintf(&b, "\\x%02x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }
