package supervisor

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/alert"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// With an alert command that hangs on every event and the metrics
// endpoint on, an incident still freezes its writer within the incident
// deadline, every event reaches the command as one JSON document, and the
// counters on /metrics move.
func TestIncidentWithHangingAlertsAndMetrics(t *testing.T) {
	home, db := testHome(t)
	dir := t.TempDir()
	got := filepath.Join(dir, "alerts.jsonl")
	script := filepath.Join(dir, "alert.sh")
	// Record the document, then hang far past any deadline.
	if err := os.WriteFile(script, []byte("#!/bin/sh\n{ cat; echo; } >> "+got+"\nexec sleep 3600\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	var al *alert.Alerter
	a := startAgent(t, home, func(o *Options) {
		al = alert.New(alert.Config{Exec: []string{script}, Timeout: 2 * time.Second, Concurrency: 2, RateLimit: -1, Metrics: m}, o.Logger)
		o.Logger = slog.New(alert.Handler(o.Logger.Handler(), al))
		o.Metrics, o.MetricsListen = m, "127.0.0.1:0"
	})
	t.Cleanup(func() { al.Close(t.Context()) })
	w := startHeldWriter(t, a, db)

	renamed := hermestest.RestoreOver(t, db)
	// The incident deadline: stopped within a second even though every
	// alert command hangs.
	hermestest.Eventually(t, "the writer to be stopped or gone", time.Second, func() bool {
		s := hermestest.StateOf(w.Pid)
		return s == 'T' || s == 'X' || s == 'Z'
	})
	t.Logf("writer stopped %v after the restore, alert commands hanging", time.Since(renamed))
	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if inc.State != journal.StateResolved {
		t.Fatalf("incident ended %s: %s", inc.State, inc.Detail.Error)
	}

	events := map[string]int{}
	hermestest.Eventually(t, "incident.opened and holder.frozen alerts", 10*time.Second, func() bool {
		f, err := os.Open(got)
		if err != nil {
			return false
		}
		defer f.Close()
		events = map[string]int{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				continue
			}
			var doc struct {
				Event, Store string
			}
			if err := json.Unmarshal([]byte(line), &doc); err != nil {
				t.Fatalf("alert stdin is not one JSON document: %q: %v", line, err)
			}
			events[doc.Event]++
		}
		return events[incident.EventIncidentOpened] == 1 && events[incident.EventHolderFrozen] == 1
	})

	fams := scrape(t, a.metrics.Addr())
	if v := metricValue(fams, "stateguard_incidents_opened_total", map[string]string{"kind": string(journal.KindReplaced)}); v != 1 {
		t.Fatalf("incidents_opened_total{kind=replaced} = %v, want 1", v)
	}
	if v := metricValue(fams, "stateguard_freeze_latency_seconds", nil); v < 1 {
		t.Fatalf("freeze latency histogram count %v, want >= 1", v)
	}
	if v := metricValue(fams, "stateguard_captures_total", nil); v < 1 {
		t.Fatalf("captures_total %v, want >= 1", v)
	}
}
