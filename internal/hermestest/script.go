package hermestest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// WriteScript writes an executable /bin/sh script into dir.
func WriteScript(tb testing.TB, dir, name, body string) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		tb.Fatal(err)
	}
	return p
}

// recorderBody appends each run's stdin and STATEGUARD_* environment to
// $OUT, one run after another (callers run it one at a time).
const recorderBody = `cat >> "$OUT"; echo "env=$STATEGUARD_EVENT|$STATEGUARD_STORE|$STATEGUARD_LEVEL" >> "$OUT"; echo "--end--" >> "$OUT"
`

// NewAlertRecorder writes an alert command that records every run: its
// stdin, then a line "env=EVENT|STORE|LEVEL". Runs reads them back.
func NewAlertRecorder(tb testing.TB) (script, out string) {
	dir := tb.TempDir()
	out = filepath.Join(dir, "out")
	script = WriteScript(tb, dir, "record.sh", "OUT="+strconv.Quote(out)+"\n"+recorderBody)
	return script, out
}

// Runs splits an alert recorder's output into one chunk per run.
func Runs(tb testing.TB, out string) []string {
	tb.Helper()
	data, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	runs := strings.Split(string(data), "--end--\n")
	return runs[:len(runs)-1]
}
