package main

import (
	"strings"
	"testing"
)

func TestTable(t *testing.T) {
	var b strings.Builder
	tb := newTable("  ", "PID", "USER", "COMMAND")
	tb.row("7", "root", "/usr/bin/python3 -m hermes")
	tb.row("12345", "u", "")
	tb.row("9", "bad\tname\n", "x\x1by")
	tb.write(&b)
	want := "" +
		"  PID    USER             COMMAND\n" +
		"  7      root             /usr/bin/python3 -m hermes\n" +
		"  12345  u\n" +
		"  9      bad\\x09name\\x0a  x\\x1by\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}
