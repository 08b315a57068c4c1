package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stateguard/stateguard/internal/version"
	"github.com/stateguard/stateguard/journal"
)

// ErrNotLoopback is returned by Serve for an address other hosts could reach.
var ErrNotLoopback = errors.New("metrics address is not a loopback address")

// HolderKey is one series of stateguard_holders.
type HolderKey struct {
	Role   string // writer, reader, ... as the holders scan names it
	Orphan bool   // holds a file that is no longer the store's current one
}

// Metrics is agentd's Prometheus registry. Every method is safe for
// concurrent use, and a nil *Metrics accepts every call and does nothing,
// so callers never check whether metrics are on.
type Metrics struct {
	reg *prometheus.Registry

	storesWatched    prometheus.Gauge
	holders          *prometheus.GaugeVec
	incidentsOpened  *prometheus.CounterVec
	incidentsOpen    *prometheus.GaugeVec
	incidentsDone    *prometheus.CounterVec
	guardStores      *prometheus.GaugeVec
	reconcileEvery   prometheus.Gauge
	buildInfo        *prometheus.GaugeVec
	freeze           prometheus.Histogram
	captures         prometheus.Counter
	captureBytes     prometheus.Counter
	captureFailures  prometheus.Counter
	replayJobs       *prometheus.CounterVec
	replayRows       prometheus.Counter
	scan             prometheus.Histogram
	lastReconcile    prometheus.Gauge
	guardArmed       prometheus.Gauge
	alerts           *prometheus.CounterVec
	stallsOpen       prometheus.Gauge
	mu               sync.Mutex // guards holdersByStore
	holdersByStore   map[string]map[HolderKey]int
	holderSeriesSeen map[HolderKey]bool
}

// NewMetrics builds the registry with every series agentd exports, plus
// the Go runtime and process collectors.
func NewMetrics() *Metrics {
	const ns = "stateguard"
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		storesWatched: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns,
			Name: "stores_watched", Help: "Stores being watched."}),
		holders: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "holders", Help: "Processes holding a watched store's files, by role; orphan=true when they hold a file that is no longer the store's current one."},
			[]string{"role", "orphan"}),
		incidentsOpened: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "incidents_opened_total", Help: "Incidents opened, by kind."}, []string{"kind"}),
		incidentsOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "incidents", Help: "Incidents not yet finished, by kind and state."}, []string{"kind", "state"}),
		incidentsDone: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "incidents_finished_total", Help: "Incidents that reached a terminal state (resolved, failed, unrecoverable), by kind and state."},
			[]string{"kind", "state"}),
		guardStores: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "guard_stores", Help: "Stores by guard state: armed, paused, off, idle (no -shm: nobody has the store open), unavailable (wanted, open, not armed)."},
			[]string{"state"}),
		reconcileEvery: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns,
			Name: "reconcile_interval_seconds", Help: "The configured full reconcile interval."}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns,
			Name: "build_info", Help: version.BuildInfoHelp}, []string{"version", "revision", "goversion", "sqlite"}),
		freeze: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns,
			Name: "freeze_latency_seconds", Help: "Time from noticing a generation change to every holder frozen.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}),
		captures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns,
			Name: "captures_total", Help: "Captures written."}),
		captureBytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns,
			Name: "capture_bytes_total", Help: "Bytes of captures written."}),
		captureFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns,
			Name: "capture_failures_total", Help: "Captures that failed."}),
		replayJobs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "replay_jobs_total", Help: "Replay jobs finished, by result (done, failed)."}, []string{"result"}),
		replayRows: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns,
			Name: "replay_rows_total", Help: "Rows replayed into stores."}),
		scan: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns,
			Name: "scan_duration_seconds", Help: "Duration of one holders scan.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}),
		lastReconcile: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns,
			Name: "last_reconcile_timestamp_seconds", Help: "Unix time of the last full reconcile."}),
		guardArmed: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns,
			Name: "guard_armed_stores", Help: "Stores whose guard is armed."}),
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns,
			Name: "alerts_total", Help: "Alerts handed to alert.exec, by result (sent, failed, dropped, suppressed)."}, []string{"result"}),
		stallsOpen: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns,
			Name: "stalls", Help: "Stalled gateways and sessions the stall watch sees now."}),
		holdersByStore:   make(map[string]map[HolderKey]int),
		holderSeriesSeen: make(map[HolderKey]bool),
	}
	// Series with labels appear only once used; a scrape should show the
	// known ones at 0 from the start, so rate() and absent() behave.
	for _, r := range []string{"done", "failed"} {
		m.replayJobs.WithLabelValues(r)
	}
	for _, r := range []string{"sent", "failed", "dropped", "suppressed"} {
		m.alerts.WithLabelValues(r)
	}
	m.initIncidentSeries()
	m.initHolderSeries()
	for _, st := range GuardStates {
		m.guardStores.WithLabelValues(st)
	}
	m.reg.MustRegister(
		m.incidentsDone, m.guardStores, m.reconcileEvery, m.buildInfo,
		m.storesWatched, m.holders, m.incidentsOpened, m.incidentsOpen, m.freeze,
		m.captures, m.captureBytes, m.captureFailures, m.replayJobs, m.replayRows,
		m.scan, m.lastReconcile, m.guardArmed, m.alerts, m.stallsOpen,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Registry is the underlying registry, for Gather in tests and tools.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

func (m *Metrics) StoresWatched(n int) {
	if m != nil {
		m.storesWatched.Set(float64(n))
	}
}

// SetHolders records one store's holder counts; stateguard_holders is the
// sum over stores. Keys missing from counts are 0 for that store.
func (m *Metrics) SetHolders(store string, counts map[HolderKey]int) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := make(map[HolderKey]int, len(counts))
	for k, n := range counts {
		c[k] = n
	}
	m.holdersByStore[store] = c
	m.sumHoldersLocked()
}

// ForgetStore drops a removed store's holder counts.
func (m *Metrics) ForgetStore(store string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.holdersByStore, store)
	m.sumHoldersLocked()
}

func (m *Metrics) sumHoldersLocked() {
	total := make(map[HolderKey]int)
	for _, c := range m.holdersByStore {
		for k, n := range c {
			total[k] += n
			m.holderSeriesSeen[k] = true
		}
	}
	// A series that was ever reported stays, at 0, rather than vanishing.
	for k := range m.holderSeriesSeen {
		m.holders.WithLabelValues(k.Role, strconv.FormatBool(k.Orphan)).Set(float64(total[k]))
	}
}

func (m *Metrics) IncidentOpened(kind string) {
	if m != nil {
		m.incidentsOpened.WithLabelValues(kind).Inc()
	}
}

// IncidentState moves the incidents gauge: +1 when an incident enters
// state, -1 when it leaves it. A terminal state is not a gauge series:
// entering one counts the incident in incidents_finished_total instead,
// so the gauge says what is open now and does not grow for ever.
func (m *Metrics) IncidentState(kind, state string, delta int) {
	if m == nil {
		return
	}
	if journal.State(state).Terminal() {
		if delta > 0 {
			m.incidentsDone.WithLabelValues(kind, state).Add(float64(delta))
		}
		return
	}
	m.incidentsOpen.WithLabelValues(kind, state).Add(float64(delta))
}

func (m *Metrics) ObserveFreeze(d time.Duration) {
	if m != nil {
		m.freeze.Observe(d.Seconds())
	}
}

func (m *Metrics) CaptureWritten(bytes int64) {
	if m != nil {
		m.captures.Inc()
		m.captureBytes.Add(float64(bytes))
	}
}

func (m *Metrics) CaptureFailed() {
	if m != nil {
		m.captureFailures.Inc()
	}
}

func (m *Metrics) ReplayDone(rows int) {
	if m != nil {
		m.replayJobs.WithLabelValues("done").Inc()
		m.replayRows.Add(float64(rows))
	}
}

func (m *Metrics) ReplayFailed() {
	if m != nil {
		m.replayJobs.WithLabelValues("failed").Inc()
	}
}

func (m *Metrics) ObserveScan(d time.Duration) {
	if m != nil {
		m.scan.Observe(d.Seconds())
	}
}

func (m *Metrics) Reconciled(t time.Time) {
	if m != nil {
		m.lastReconcile.Set(float64(t.UnixNano()) / 1e9)
	}
}

func (m *Metrics) GuardArmed(n int) {
	if m != nil {
		m.guardArmed.Set(float64(n))
	}
}

// GuardArmedAdd moves the armed-guards gauge by one store's transition.
func (m *Metrics) GuardArmedAdd(delta int) {
	if m != nil {
		m.guardArmed.Add(float64(delta))
	}
}

// StallState moves the stalls gauge: +1 per stall.detected, -1 per
// stall.cleared.
func (m *Metrics) StallState(delta int) {
	if m != nil {
		m.stallsOpen.Add(float64(delta))
	}
}

// CountAlert counts one alert by result (sent, failed, dropped,
// suppressed); it makes Metrics an alert.Counter.
func (m *Metrics) CountAlert(result string) {
	if m != nil {
		m.alerts.WithLabelValues(result).Inc()
	}
}

// MetricsServer serves /metrics until closed.
type MetricsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// Serve listens on listen, which must be a loopback address (127.0.0.1,
// [::1], localhost; port 0 picks one): the endpoint has no
// authentication. It serves until ctx ends or Close.
func (m *Metrics) Serve(ctx context.Context, listen string, log *slog.Logger) (*MetricsServer, error) {
	return m.serve(ctx, listen, log, defaultMetricsLimits)
}

func (m *Metrics) serve(ctx context.Context, listen string, log *slog.Logger, lim metricsLimits) (*MetricsServer, error) {
	if m == nil {
		return nil, errors.New("serve metrics: metrics are off")
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("subsystem", "metrics")
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("serve metrics on %q: %w (hint: metrics.listen is host:port, e.g. 127.0.0.1:9464)", listen, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("serve metrics on %q: %w (hint: the endpoint is unauthenticated; use 127.0.0.1 or [::1] and a proxy if it must be reached remotely)", listen, ErrNotLoopback)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("serve metrics on %s: %w", listen, err)
	}
	// localhost is resolved by the system; make sure it meant loopback.
	if ta, ok := ln.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("serve metrics on %q: bound %s: %w", listen, ln.Addr(), ErrNotLoopback)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling:     promhttp.ContinueOnError,
		Registry:          m.reg,
		EnableOpenMetrics: true,
	}))
	// Bounded in number and in time (metricsLimits): a local user's idle
	// connections must not take the fds the scans and pins need.
	ln = newLimitListener(ln, lim.maxConns)
	s := &MetricsServer{
		ln:   ln,
		done: make(chan struct{}),
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: lim.readHeader,
			ReadTimeout:       lim.read,
			WriteTimeout:      lim.write,
			IdleTimeout:       lim.idle,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err, "addr", ln.Addr().String())
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			s.srv.Close()
		case <-s.done:
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return s, nil
}

// Addr is the address bound, with the port chosen when listen had port 0.
func (s *MetricsServer) Addr() string { return s.ln.Addr().String() }

// Close stops the server, letting scrapes in flight finish until ctx ends.
func (s *MetricsServer) Close(ctx context.Context) error {
	if s == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	<-s.done
	if err != nil {
		return fmt.Errorf("close metrics server: %w", err)
	}
	return nil
}
