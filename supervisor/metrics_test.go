package supervisor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stateguard/stateguard/alert"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// scrape GETs /metrics and parses it with Prometheus' text parser.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s: %s", resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want the text format", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// metricValue finds the series of name whose labels include want and
// returns its counter or gauge value, a histogram's count, or -1 when no
// series matches.
func metricValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

func gatherValue(t *testing.T, m *Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	return metricValue(byName, name, labels)
}

// metricWant is one expected sample value.
type metricWant struct {
	name   string
	labels map[string]string
	want   float64
}

func expectMetrics(t *testing.T, when string, fams map[string]*dto.MetricFamily, wants []metricWant) {
	t.Helper()
	for _, w := range wants {
		if v := metricValue(fams, w.name, w.labels); v != w.want {
			t.Errorf("%s %s%v = %v, want %v", when, w.name, w.labels, v, w.want)
		}
	}
}

// driveMetrics calls every recorder of m once or a few times, and sends
// one alert through an alerter counting into m.
func driveMetrics(t *testing.T, m *Metrics, log *slog.Logger) {
	t.Helper()
	m.StoresWatched(3)
	m.SetHolders("/a", map[HolderKey]int{{Role: "writer"}: 2, {Role: "reader", Orphan: true}: 1})
	m.SetHolders("/b", map[HolderKey]int{{Role: "writer"}: 1})
	m.IncidentOpened("replaced")
	m.IncidentState("replaced", "frozen", 1)
	m.IncidentState("replaced", "frozen", -1)
	m.IncidentState("replaced", "captured", 1)
	m.ObserveFreeze(3 * time.Millisecond)
	m.CaptureWritten(4096)
	m.CaptureFailed()
	m.ReplayDone(10)
	m.ReplayFailed()
	m.ObserveScan(20 * time.Millisecond)
	m.Reconciled(time.Unix(1767225600, 500_000_000))
	m.GuardArmed(2)
	m.StallState(1)
	a := alert.New(alert.Config{Exec: []string{"/bin/sh", "-c", "cat >/dev/null"}, Metrics: m}, log)
	a.Send(alert.Alert{Event: incident.EventIncidentOpened, Store: "/a"})
	if err := a.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := hermestest.TestLogger(t)
	m := NewMetrics()
	srv, err := m.Serve(ctx, "127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(context.Background())

	before := scrape(t, srv.Addr())
	expectMetrics(t, "before any call", before, []metricWant{
		{"stateguard_stores_watched", nil, 0},
		{"stateguard_captures_total", nil, 0},
		{"stateguard_replay_jobs_total", map[string]string{"result": "failed"}, 0},
		{"stateguard_alerts_total", map[string]string{"result": "dropped"}, 0},
		{"stateguard_freeze_latency_seconds", nil, 0},
	})
	if before["go_goroutines"] == nil {
		t.Error("the Go collector is missing")
	}

	driveMetrics(t, m, log)
	after := scrape(t, srv.Addr())
	expectMetrics(t, "after", after, []metricWant{
		{"stateguard_stores_watched", nil, 3},
		{"stateguard_holders", map[string]string{"role": "writer", "orphan": "false"}, 3},
		{"stateguard_holders", map[string]string{"role": "reader", "orphan": "true"}, 1},
		{"stateguard_incidents_opened_total", map[string]string{"kind": "replaced"}, 1},
		{"stateguard_incidents", map[string]string{"kind": "replaced", "state": "frozen"}, 0},
		{"stateguard_incidents", map[string]string{"kind": "replaced", "state": "captured"}, 1},
		{"stateguard_freeze_latency_seconds", nil, 1},
		{"stateguard_captures_total", nil, 1},
		{"stateguard_capture_bytes_total", nil, 4096},
		{"stateguard_capture_failures_total", nil, 1},
		{"stateguard_replay_jobs_total", map[string]string{"result": "done"}, 1},
		{"stateguard_replay_jobs_total", map[string]string{"result": "failed"}, 1},
		{"stateguard_replay_rows_total", nil, 10},
		{"stateguard_scan_duration_seconds", nil, 1},
		{"stateguard_last_reconcile_timestamp_seconds", nil, 1767225600.5},
		{"stateguard_guard_armed_stores", nil, 2},
		{"stateguard_stalls", nil, 1},
		{"stateguard_alerts_total", map[string]string{"result": "sent"}, 1},
	})
	// The freeze lands in the sub-5ms bucket, not only the +Inf one.
	h := after["stateguard_freeze_latency_seconds"].GetMetric()[0].GetHistogram()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == 0.0001 && b.GetCumulativeCount() != 0 || b.GetUpperBound() == 0.005 && b.GetCumulativeCount() != 1 {
			t.Errorf("freeze bucket le=%v count %d", b.GetUpperBound(), b.GetCumulativeCount())
		}
	}

	m.ForgetStore("/a")
	expectMetrics(t, "after forgetting /a", scrape(t, srv.Addr()), []metricWant{
		{"stateguard_holders", map[string]string{"role": "reader", "orphan": "true"}, 0},
		{"stateguard_holders", map[string]string{"role": "writer", "orphan": "false"}, 1},
	})
}

func TestMetricsRefusesNonLoopback(t *testing.T) {
	m := NewMetrics()
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:9464", "[::]:0", "example.com:9464"} {
		srv, err := m.Serve(context.Background(), addr, nil)
		if !errors.Is(err, ErrNotLoopback) {
			if srv != nil {
				srv.Close(context.Background())
			}
			t.Errorf("Serve(%q) = %v, want ErrNotLoopback", addr, err)
		}
	}
	if _, err := m.Serve(context.Background(), "127.0.0.1", nil); err == nil || errors.Is(err, ErrNotLoopback) {
		t.Errorf("an address without a port: %v", err)
	}
}

func TestMetricsServerStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	log := hermestest.TestLogger(t)
	srv, err := NewMetrics().Serve(ctx, "localhost:0", log)
	if err != nil {
		t.Fatal(err)
	}
	scrape(t, srv.Addr())
	cancel()
	hermestest.Eventually(t, "the server to stop", 10*time.Second, func() bool {
		resp, err := http.Get("http://" + srv.Addr() + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	})
	if err := srv.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestMetricsNilIsNoOp(t *testing.T) {
	var m *Metrics
	m.StoresWatched(1)
	m.SetHolders("/a", map[HolderKey]int{{Role: "writer"}: 1})
	m.ForgetStore("/a")
	m.IncidentOpened("replaced")
	m.IncidentState("replaced", "frozen", 1)
	m.ObserveFreeze(time.Millisecond)
	m.CaptureWritten(1)
	m.CaptureFailed()
	m.ReplayDone(1)
	m.ReplayFailed()
	m.ObserveScan(time.Millisecond)
	m.Reconciled(time.Now())
	m.GuardArmed(1)
	m.StallState(1)
	m.CountAlert("sent")
	if m.Registry() != nil {
		t.Error("nil Metrics has a registry")
	}
	if _, err := m.Serve(context.Background(), "127.0.0.1:0", nil); err == nil {
		t.Error("nil Metrics served")
	}
	var s *MetricsServer
	if err := s.Close(context.Background()); err != nil {
		t.Error(err)
	}
}

// TestIncidentMetricsFinish: an incident that reaches a terminal state
// leaves the incidents gauge (which says what is open now) and is counted
// once in incidents_finished_total; every kind's counters start at 0.
func TestIncidentMetricsFinish(t *testing.T) {
	m := NewMetrics()
	for _, k := range incidentKinds {
		for _, name := range []string{"stateguard_incidents_opened_total", "stateguard_incidents_finished_total"} {
			labels := map[string]string{"kind": string(k)}
			if name == "stateguard_incidents_finished_total" {
				labels["state"] = "unrecoverable"
			}
			if v := gatherValue(t, m, name, labels); v != 0 {
				t.Errorf("%s%v starts at %v, want 0", name, labels, v)
			}
		}
	}
	m.IncidentOpened("replaced")
	m.IncidentState("replaced", "open", 1)
	m.IncidentState("replaced", "open", -1)
	m.IncidentState("replaced", "frozen", 1)
	m.IncidentState("replaced", "frozen", -1)
	m.IncidentState("replaced", "resolved", 1)
	// -1: no such series at all.
	if v := gatherValue(t, m, "stateguard_incidents", map[string]string{"kind": "replaced", "state": "resolved"}); v != -1 {
		t.Errorf("the incidents gauge has a resolved series: %v", v)
	}
	if v := gatherValue(t, m, "stateguard_incidents", map[string]string{"kind": "replaced", "state": "frozen"}); v != 0 {
		t.Errorf("incidents{frozen} = %v after the incident moved on", v)
	}
	if v := gatherValue(t, m, "stateguard_incidents_finished_total", map[string]string{"kind": "replaced", "state": "resolved"}); v != 1 {
		t.Errorf("incidents_finished_total{replaced,resolved} = %v, want 1", v)
	}
	m.GuardStoreMove("", GuardIdle)
	m.GuardStoreMove("", "unavailable")
	m.GuardStoreMove("unavailable", GuardIdle)
	if v := gatherValue(t, m, "stateguard_guard_stores", map[string]string{"state": GuardIdle}); v != 2 {
		t.Errorf("guard_stores{idle} = %v, want 2", v)
	}
	if v := gatherValue(t, m, "stateguard_guard_stores", map[string]string{"state": "unavailable"}); v != 0 {
		t.Errorf("guard_stores{unavailable} = %v, want 0", v)
	}
}
