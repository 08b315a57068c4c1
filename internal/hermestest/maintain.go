package hermestest

import (
	"os/exec"
	"testing"
)

// Maintain runs one of Hermes' maintenance operations on db from a
// process of its own (the writer's -maintenance: vacuum, journal-delete,
// journal-wal, restore:<backup>) and returns what it printed and its
// error: a refusal is SQLite's own text, as Hermes' operator sees it.
func Maintain(tb testing.TB, db, op string) (string, error) {
	tb.Helper()
	bin, err := WriterBinary()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := exec.Command(bin, "-db", db, "-maintenance", op).CombinedOutput()
	return string(out), err
}
