package alert

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// The log level and the alert path are independent: a warn-level log
// still alerts info events, never debug ones or quiet ones, and a record
// without an event is only logged.
func TestHandlerAlertsWhatTheLogLeavesOut(t *testing.T) {
	script, out := hermestest.NewAlertRecorder(t)
	logs := &hermestest.LogBuffer{}
	base := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a := New(Config{Exec: []string{script}, Concurrency: 1, RateLimit: -1, Quiet: []string{"quiet.event"}}, base)
	log := slog.New(Handler(base.Handler(), a)).With("store", "/s")
	log.Info("resolved", "event", "incident.resolved", "id", 7)
	log.Info("discovered", "event", "quiet.event")
	log.Debug("detail", "event", "debug.event")
	log.Warn("stalled", "event", "stall.detected")
	log.Error("no event at all")
	closeAlerter(t, a)

	var alerted []string
	for _, run := range hermestest.Runs(t, out) {
		doc, _, _ := strings.Cut(run, "env=")
		var d struct {
			Event, Store, Level string
			Fields              map[string]any
		}
		if err := json.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		alerted = append(alerted, d.Event+" "+d.Level+" "+d.Store+" "+fmt.Sprint(d.Fields["id"]))
	}
	if want := []string{"incident.resolved INFO /s 7", "stall.detected WARN /s <nil>"}; fmt.Sprint(alerted) != fmt.Sprint(want) {
		t.Errorf("alerted %q, want %q", alerted, want)
	}
	if n := len(logs.Records(t, "incident.resolved")) + len(logs.Records(t, "quiet.event")); n != 0 {
		t.Errorf("a warn-level log wrote %d info records", n)
	}
	if n := len(logs.Records(t, "stall.detected")); n != 1 {
		t.Errorf("%d stall.detected log records, want 1", n)
	}
}
