package journald_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/internal/journald"
	"github.com/stateguard/stateguard/internal/journald/journaldtest"
)

func newHandler(t *testing.T, j *journaldtest.Journal, o journald.Options) *journald.Handler {
	t.Helper()
	o.Socket = j.Socket
	h, err := journald.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func next(t *testing.T, j *journaldtest.Journal) journaldtest.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := j.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEventFields(t *testing.T) {
	j := journaldtest.Listen(t)
	log := slog.New(newHandler(t, j, journald.Options{Identifier: "agentd", AddSource: true, Level: slog.LevelDebug}))
	w := log.With("subsystem", "worker", "store", "/home/a b/.hermes/state.db", "profile", "default")
	w.Error("incident opened", "event", "incident.opened", "incident", int64(17), "kind", "replaced",
		"holders", []int{101, 102}, "took", 1500*time.Millisecond, "err", errors.New("it\nbroke"))
	e := next(t, j)
	want := map[string]string{
		"EVENT":             "incident.opened",
		"STORE":             "/home/a b/.hermes/state.db",
		"PROFILE":           "default",
		"INCIDENT":          "17",
		"KIND":              "replaced",
		"SUBSYSTEM":         "worker",
		"PRIORITY":          "3",
		"SYSLOG_IDENTIFIER": "agentd",
		"HOLDERS":           "[101,102]",
		"TOOK":              "1.5s",
		"ERR":               "it\nbroke", // a newline: the length-prefixed encoding
		"CODE_FILE":         thisFile(t),
	}
	if !e.Matches(want) {
		t.Errorf("entry %v\ndoes not have %v", e.Fields, want)
	}
	if line, err := strconv.Atoi(e.Get("CODE_LINE")); err != nil || line <= 0 || !strings.HasSuffix(e.Get("CODE_FUNC"), "TestEventFields") {
		t.Errorf("CODE_LINE=%q CODE_FUNC=%q", e.Get("CODE_LINE"), e.Get("CODE_FUNC"))
	}
	msg := e.Get("MESSAGE")
	for _, part := range []string{"incident opened ", `store="/home/a b/.hermes/state.db"`, "event=incident.opened", "incident=17", `err="it\nbroke"`} {
		if !strings.Contains(msg, part) {
			t.Errorf("MESSAGE %q lacks %s", msg, part)
		}
	}
	if strings.HasPrefix(msg, "incident opened") == false {
		t.Errorf("MESSAGE %q does not start with the record's message", msg)
	}

	for _, tt := range []struct {
		level slog.Level
		want  string
	}{{slog.LevelDebug, "7"}, {slog.LevelInfo, "6"}, {slog.LevelWarn, "4"}, {slog.LevelError + 4, "3"}} {
		log.Log(context.Background(), tt.level, "x")
		if got := next(t, j).Get("PRIORITY"); got != tt.want {
			t.Errorf("level %v: PRIORITY=%s, want %s", tt.level, got, tt.want)
		}
	}
}

func thisFile(t *testing.T) string {
	abs, err := filepath.Abs("handler_linux_test.go")
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func TestGroupsAndReservedNames(t *testing.T) {
	j := journaldtest.Listen(t)
	log := slog.New(newHandler(t, j, journald.Options{}))
	log.WithGroup("scan").With("pids", 3).Info("m", slog.Group("blind", "first_pid", 1), "message", "not mine", "priority", "0", "_PID", 1, "9lives", true)
	e := next(t, j)
	want := map[string]string{
		"SCAN_PIDS": "3", "SCAN_BLIND_FIRST_PID": "1",
		"SCAN_MESSAGE": "not mine", "SCAN_PRIORITY": "0", "SCAN__PID": "1", "SCAN_9LIVES": "true",
		"PRIORITY": "6", "SYSLOG_IDENTIFIER": filepath.Base(os.Args[0]),
	}
	if !e.Matches(want) {
		t.Errorf("entry %v\ndoes not have %v", e.Fields, want)
	}
	if got := e.Fields["MESSAGE"]; len(got) != 1 || !strings.HasPrefix(got[0], "m scan.pids=3 scan.blind.first_pid=1") {
		t.Errorf("MESSAGE = %q", got)
	}
	if _, ok := e.Fields["CODE_FILE"]; ok {
		t.Error("CODE_FILE without AddSource")
	}
	log.Info("top", "message", "not mine", "priority", "0", "_PID", 1, "9lives", true)
	want = map[string]string{"ATTR_MESSAGE": "not mine", "ATTR_PRIORITY": "0", "ATTR__PID": "1", "ATTR_9LIVES": "true", "PRIORITY": "6"}
	if e := next(t, j); !e.Matches(want) || len(e.Fields["MESSAGE"]) != 1 || len(e.Fields["PRIORITY"]) != 1 {
		t.Errorf("entry %v\ndoes not have %v, and MESSAGE and PRIORITY once", e.Fields, want)
	}
	log.Debug("below the level")
	log.Info("after")
	if got := next(t, j).Get("MESSAGE"); got != "after" {
		t.Errorf("next MESSAGE = %q; the debug record went out at info", got)
	}
}

func TestFieldName(t *testing.T) {
	for _, tt := range []struct {
		groups []string
		key    string
		want   string
	}{
		{nil, "event", "EVENT"},
		{nil, "latency_ms", "LATENCY_MS"},
		{nil, "a.b-c d", "A_B_C_D"},
		{[]string{"g", "h"}, "k", "G_H_K"},
		{nil, "_pid", "ATTR__PID"},
		{nil, "1st", "ATTR_1ST"},
		{nil, "message", "ATTR_MESSAGE"},
		{nil, "Ünï", "_N_"},
		{nil, strings.Repeat("x", 70), strings.Repeat("X", 64)},
	} {
		got := journald.FieldName(tt.groups, tt.key)
		if tt.key == "Ünï" {
			tt.want = "ATTR__N_"
		}
		if got != tt.want {
			t.Errorf("FieldName(%q, %q) = %q, want %q", tt.groups, tt.key, got, tt.want)
		}
	}
}

// TestBigEntryGoesThroughMemfd: an entry past the send buffer cannot be a
// datagram; it must arrive whole, through a sealed memfd.
func TestBigEntryGoesThroughMemfd(t *testing.T) {
	j := journaldtest.Listen(t)
	log := slog.New(newHandler(t, j, journald.Options{}))
	big := strings.Repeat("0123456789abcdef", 9<<20/16) // 9 MiB, past the 8 MiB send buffer
	log.Info("big", "event", "capture.written", "blob", big)
	e := next(t, j)
	if !e.ViaFD {
		t.Error("a 9 MiB entry came as a datagram")
	}
	if e.Get("EVENT") != "capture.written" || e.Get("BLOB") != big {
		t.Errorf("entry through the memfd lost fields: EVENT=%q, BLOB %d bytes of %d", e.Get("EVENT"), len(e.Get("BLOB")), len(big))
	}
	log.Info("small")
	if e := next(t, j); e.ViaFD || e.Get("MESSAGE") != "small" {
		t.Errorf("after a big entry, a small one: via fd %v, MESSAGE %q", e.ViaFD, e.Get("MESSAGE"))
	}
}

func TestFallbackWhenJournalIsGone(t *testing.T) {
	var out bytes.Buffer
	fb := slog.NewJSONHandler(&out, nil)
	h, err := journald.New(journald.Options{Socket: filepath.Join(t.TempDir(), "no-journal"), Fallback: fb})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	slog.New(h).With("store", "/s").Error("incident opened", "event", "incident.opened")
	var rec map[string]any
	if err := json.Unmarshal(out.Bytes(), &rec); err != nil {
		t.Fatalf("fallback got %q: %v", out.String(), err)
	}
	if rec["event"] != "incident.opened" || rec["store"] != "/s" || rec["msg"] != "incident opened" {
		t.Errorf("fallback record = %v", rec)
	}

	noFB, err := journald.New(journald.Options{Socket: filepath.Join(t.TempDir(), "no-journal")})
	if err != nil {
		t.Fatal(err)
	}
	defer noFB.Close()
	if err := noFB.Handle(context.Background(), slog.NewRecord(time.Now(), slog.LevelInfo, "x", 0)); err == nil || !strings.Contains(err.Error(), "no-journal") {
		t.Errorf("Handle without a journal or fallback = %v; want an error naming the socket", err)
	}
}

func TestIsJournalStream(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	match := strconv.FormatUint(uint64(st.Dev), 10) + ":" + strconv.FormatUint(st.Ino, 10)
	other := strconv.FormatUint(uint64(st.Dev), 10) + ":" + strconv.FormatUint(st.Ino+1, 10)
	for _, tt := range []struct {
		env  string
		want bool
		bad  bool
	}{
		{"", false, false},
		{match, true, false},
		{other, false, false}, // stderr redirected away from the journal's stream
		{"12", false, true},
		{"a:b", false, true},
		{match + "x", false, true},
	} {
		got, err := journald.IsJournalStream(tt.env, f)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("IsJournalStream(%q) = %v, %v; want %v, error %v", tt.env, got, err, tt.want, tt.bad)
		}
	}
}
