//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/recovery"
)

// captureFixture makes a real capture: an orphan store whose session s1
// has rows 1-3 in its main (the healthy store is a copy of that main) and
// rows 4-7 only in its WAL, copied with WriteCapture from fds opened
// here. Timestamps are base+seq.
func captureFixture(t *testing.T, kind, incident string) (capture, healthy string, base float64) {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, "state.db")
	if err := hermestest.CreateStore(orphan); err != nil {
		t.Fatal(err)
	}
	db := hermestest.OpenNoCheckpoint(t, orphan)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	base = 1_790_000_000
	exec(`INSERT INTO sessions (id, source, started_at) VALUES ('s1', 'cli', ?)`, base)
	for seq := 1; seq <= 7; seq++ {
		exec(`INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s1', 'user', ?, ?)`,
			"row "+strconv.Itoa(seq), base+float64(seq))
		exec(`UPDATE sessions SET message_count = message_count + 1 WHERE id = 's1'`)
		if seq == 3 {
			exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
			healthy = filepath.Join(home, "state.db")
			hermestest.CopyFile(t, orphan, healthy, 0o600)
		}
	}
	var src recovery.CaptureSource
	src.Main, src.WAL, src.SHM = hermestest.OpenGeneration(t, orphan)
	c, err := recovery.WriteCapture(context.Background(), src, recovery.CaptureRequest{
		DBPath: orphan, PID: os.Getpid(), Kind: kind, IncidentID: incident, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return c.Dir, healthy, base
}

func TestReplayCaptureSidecarLost(t *testing.T) {
	capture, healthy, _ := captureFixture(t, recovery.KindSidecarLost, "inc-9")
	r := ctl(t, nil, "replay", "--capture", capture, "--db", healthy, "--now")
	if r.code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	want := filepath.Join(filepath.Dir(healthy), "sessions", "recovered", "inc-9", "s1.jsonl")
	if !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "4 appended") {
		t.Fatalf("stdout:\n%s", r.stdout)
	}
	if n := countRows(t, healthy, "s1"); n != 7 {
		t.Fatalf("store has %d rows, want 7", n)
	}
	again := ctl(t, nil, "replay", "--capture", capture, "--db", healthy, "--now")
	if again.code != exitOK || !strings.Contains(again.stdout, "already diverted") || !strings.Contains(again.stdout, "0 appended") {
		t.Fatalf("again: exit %d\n%s\n%s", again.code, again.stdout, again.stderr)
	}
	if n := countRows(t, healthy, "s1"); n != 7 {
		t.Fatalf("store has %d rows after a second run, want 7", n)
	}
}

func TestReplayCaptureReplaced(t *testing.T) {
	capture, healthy, base := captureFixture(t, recovery.KindReplaced, "inc-r")
	r := ctl(t, nil, "replay", "--capture", capture, "--db", healthy, "--now")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--replaced-at") {
		t.Fatalf("without --replaced-at: exit %d\n%s", r.code, r.stderr)
	}
	at := strconv.FormatFloat(base+5, 'f', -1, 64) // rows 4 and 5 were rolled back
	r = ctl(t, nil, "replay", "--capture", capture, "--db", healthy, "--now", "--replaced-at", at)
	if r.code != exitOK || !strings.Contains(r.stdout, "not replayed") {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if n := countRows(t, healthy, "s1"); n != 5 {
		t.Fatalf("store has %d rows, want 3 + rows 6 and 7", n)
	}
	r = ctl(t, nil, "replay", "--capture", capture, "--db", healthy, "--now", "--replaced-at", at, "--include-pre-replacement")
	if r.code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if n := countRows(t, healthy, "s1"); n != 7 {
		t.Fatalf("store has %d rows with pre-replacement, want 7", n)
	}
	// Another replacement time for the same incident is refused.
	r = ctl(t, nil, "replay", "--capture", capture, "--db", healthy, "--now", "--replaced-at", "2026-10-01T07:00:00Z")
	if r.code != exitError || !strings.Contains(r.stderr, "remove that directory") {
		t.Fatalf("another time: exit %d\n%s", r.code, r.stderr)
	}
}

func TestReplayCaptureRefusals(t *testing.T) {
	capture, healthy, _ := captureFixture(t, recovery.KindSidecarLost, "inc-u")
	for _, args := range [][]string{
		{"x.jsonl", "--capture", capture},
		{"--capture", capture, "--session-id", "s1"},
		{"--capture", capture, "--inspect-only"},
		{"x.jsonl", "--include-pre-replacement"},
		{"x.jsonl", "--replaced-at", "1"},
	} {
		r := ctl(t, nil, append(append([]string{"replay"}, args...), "--db", healthy, "--now")...)
		if r.code != exitUsage {
			t.Fatalf("%v: exit %d\n%s", args, r.code, r.stderr)
		}
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(filepath.Dir(healthy), "sessions")); err != nil {
		t.Fatal(err)
	}
	r := ctl(t, nil, "replay", "--capture", capture, "--db", healthy, "--now")
	if r.code != exitRefused || !strings.Contains(r.stderr, "symlink") {
		t.Fatalf("symlinked sessions: exit %d\n%s", r.code, r.stderr)
	}
	if n := countRows(t, healthy, "s1"); n != 3 {
		t.Fatalf("store has %d rows after a refusal, want 3", n)
	}
}

// TestReplayHermesCapture: a capture Hermes wrote has no incident id, so
// the divert is named after the capture directory.
func TestReplayHermesCapture(t *testing.T) {
	fixture, err := filepath.Abs("../../recovery/testdata/capture/hermes-v1/state.db.retired-wal-20261001-072448-3624811")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	healthy := filepath.Join(home, "state.db")
	if err := hermestest.CreateStore(healthy); err != nil {
		t.Fatal(err)
	}
	r := ctl(t, nil, "replay", "--capture", fixture, "--db", healthy, "--now")
	if r.code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	want := filepath.Join(home, "sessions", "recovered", "manual-"+filepath.Base(fixture), "s1.jsonl")
	if _, err := os.Stat(want); err != nil || !strings.Contains(r.stdout, "(session created)") {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if n := countRows(t, healthy, "s1"); n != 5 {
		t.Fatalf("store has %d rows, want 5", n)
	}
}
