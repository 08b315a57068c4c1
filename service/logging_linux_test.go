package service

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/internal/journald/journaldtest"
)

// streamOf is the $JOURNAL_STREAM value systemd would set for f.
func streamOf(t *testing.T, f *os.File) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return strconv.FormatUint(uint64(st.Dev), 10) + ":" + strconv.FormatUint(st.Ino, 10)
}

func TestLoggerChoosesTheJournalUnderSystemd(t *testing.T) {
	j := journaldtest.Listen(t)
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	other, err := os.Create(filepath.Join(t.TempDir(), "redirected"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	cases := []struct {
		name   string
		format LogFormat
		stream string
		socket string
		want   LogFormat
	}{
		{"stderr is the journal stream", LogAuto, streamOf(t, stderr), j.Socket, LogJournal},
		{"stderr redirected elsewhere", LogAuto, streamOf(t, other), j.Socket, LogJSON},
		{"not under systemd", LogAuto, "", j.Socket, LogJSON},
		{"json asked for", LogJSON, streamOf(t, stderr), j.Socket, LogJSON},
		{"journal asked for", LogJournal, "", j.Socket, LogJournal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := stderr.Truncate(0); err != nil {
				t.Fatal(err)
			}
			if _, err := stderr.Seek(0, 0); err != nil {
				t.Fatal(err)
			}
			out := LogOutput{Stderr: stderr, JournalSocket: c.socket,
				Getenv: func(k string) string { return map[string]string{"JOURNAL_STREAM": c.stream}[k] }}
			log, got := out.Logger(LogConfig{Format: c.format, Level: "info"})
			if got != c.want {
				t.Fatalf("format %s, want %s", got, c.want)
			}
			log.Error("incident opened", "event", "incident.opened", "store", "/s", "case", c.name)
			if c.want == LogJournal {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				e, err := j.WaitFor(ctx, map[string]string{"CASE": c.name})
				if err != nil {
					t.Fatal(err)
				}
				if !e.Matches(map[string]string{"EVENT": "incident.opened", "STORE": "/s", "PRIORITY": "3", "SYSLOG_IDENTIFIER": "agentd"}) {
					t.Errorf("journal entry %v", e.Fields)
				}
				if b, _ := os.ReadFile(stderr.Name()); len(b) > 0 {
					t.Errorf("the journal's record also went to stderr: %s", b)
				}
				return
			}
			var rec map[string]any
			b, _ := os.ReadFile(stderr.Name())
			if err := json.Unmarshal(b, &rec); err != nil || rec["event"] != "incident.opened" {
				t.Errorf("stderr = %q (%v); want the JSON record", b, err)
			}
		})
	}
}

func TestLoggerFallsBackToStderrWithoutJournald(t *testing.T) {
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	out := LogOutput{Stderr: stderr, JournalSocket: filepath.Join(t.TempDir(), "no-journald"),
		Getenv: func(k string) string { return map[string]string{"JOURNAL_STREAM": streamOf(t, stderr)}[k] }}
	log, _ := out.Logger(LogConfig{Format: LogAuto})
	log.Error("incident opened", "event", "incident.opened")
	b, _ := os.ReadFile(stderr.Name())
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil || rec["event"] != "incident.opened" {
		t.Errorf("with journald gone, stderr = %q (%v); want the record as JSON", b, err)
	}
}
