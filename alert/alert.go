package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"
)

// Event names of the alerter itself.
const (
	EventAlertFailed  = "alert.failed"
	EventAlertDropped = "alert.dropped"
)

// Defaults for a zero Config.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultConcurrency = 4
	DefaultRateLimit   = time.Minute
	DefaultQueue       = 64
	// alertOutputTail is how much of a failed command's output is logged.
	alertOutputTail = 2048
)

// Alert is one event handed to the operator's alert command. It reaches the
// command's stdin as one JSON document followed by a newline:
//
//	{"event":"incident.opened","level":"ERROR","store":"/home/a/.hermes/state.db",
//	 "time":"2026-01-02T15:04:05.123456789Z","fields":{"kind":"replaced","suppressed":3}}
//
// level is slog's spelling (DEBUG, INFO, WARN, ERROR); time is RFC 3339
// with nanoseconds, in UTC; fields is always an object, possibly empty.
// An error value in Fields is written as its message. fields.suppressed,
// when present, counts the alerts of the same owner (the uid of the
// store's directory) and event that the rate limit held back since the
// last one delivered. An error-level alert is never held back or
// dropped; under a flood fields.coalesced counts the ones of the same
// owner and event folded into it and fields.stores names their stores
// (urgent.go).
//
// The command also gets STATEGUARD_EVENT, STATEGUARD_STORE and
// STATEGUARD_LEVEL in its environment, for scripts that only route.
type Alert struct {
	Event  string
	Level  slog.Level
	Store  string
	Time   time.Time
	Fields map[string]any
}

type alertDoc struct {
	Event  string         `json:"event"`
	Level  string         `json:"level"`
	Store  string         `json:"store"`
	Time   string         `json:"time"`
	Fields map[string]any `json:"fields"`
}

// MarshalJSON writes the documented shape.
func (a Alert) MarshalJSON() ([]byte, error) {
	doc := alertDoc{
		Event:  a.Event,
		Level:  a.Level.String(),
		Store:  a.Store,
		Time:   a.Time.UTC().Format(time.RFC3339Nano),
		Fields: make(map[string]any, len(a.Fields)),
	}
	for k, v := range a.Fields {
		doc.Fields[k] = jsonValue(v)
	}
	return json.Marshal(doc)
}

// jsonValue makes a field value encodable: an error becomes its message
// (encoding/json would write {}), anything json cannot encode its %v.
func jsonValue(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case error:
		return x.Error()
	case time.Duration:
		return x.String()
	case slog.Value:
		return jsonValue(x.Resolve().Any())
	}
	if _, err := json.Marshal(v); err != nil {
		return fmt.Sprint(v)
	}
	return v
}

// Config configures an Alerter. The zero value (no Exec) disables
// alerting.
type Config struct {
	// Exec is the command and its arguments; empty disables alerting.
	Exec []string
	// Timeout bounds one run; the command's process group is killed
	// after it. 0 means DefaultTimeout.
	Timeout time.Duration
	// Concurrency bounds the commands running at once. 0 means
	// DefaultConcurrency.
	Concurrency int
	// RateLimit is the window per (owner, event), the owner being the
	// uid of the store's directory: one alert per window, the rest
	// counted and reported in the next one. Error-level alerts are not
	// limited. 0 means DefaultRateLimit; negative disables the limit.
	// The window is measured in the alerts' own Time.
	RateLimit time.Duration
	// Queue is how many alerts below error level may wait for a free
	// slot; beyond it new ones are dropped and counted. 0 means
	// DefaultQueue. Error-level alerts wait in their own bounded list.
	Queue int
	// Quiet are event names logged but never alerted (nil: none).
	Quiet []string
	// Metrics, if set, counts alerts sent, failed, dropped, suppressed.
	Metrics Counter
}

// Counter counts alerts by result: sent, failed, dropped, suppressed.
type Counter interface {
	CountAlert(result string)
}

// count counts one alert, if a Counter is set.
func (a *Alerter) count(result string) {
	if a.cfg.Metrics != nil {
		a.cfg.Metrics.CountAlert(result)
	}
}

// AlertStats are an Alerter's counters since it was made. Coalesced
// counts error-level alerts folded into another of the same owner and
// event (delivered with it, not dropped).
type AlertStats struct {
	Sent, Failed, Dropped, Suppressed, Coalesced uint64
}

// Alerter runs the operator's alert command for each event, off the
// caller's goroutine: Send never waits on the command, on a slot, or on
// the queue. A nil *Alerter is valid and drops everything.
type Alerter struct {
	cfg     Config
	log     *slog.Logger
	queue   chan Alert
	ctx     context.Context // canceled by Close when it gives up
	cancel  context.CancelFunc
	workers sync.WaitGroup
	running atomic.Int64 // commands running now, for tests

	sent, failed, dropped, suppressed, coalesced atomic.Uint64

	quiet map[string]bool

	mu        sync.Mutex // guards what follows; never held across I/O but logging
	closed    bool
	rate      map[alertKey]*rateState
	dropBurst uint64           // drops since the queue last had room
	urgent    []*urgent        // error-level alerts, served first (urgent.go)
	urgentN   map[alertKey]int // urgent's alerts per key
	wake      chan struct{}    // a worker waiting on the queue looks at urgent
}

// alertKey is an owner (ownerKey) and an event.
type alertKey struct{ owner, event string }

type rateState struct {
	last       time.Time
	suppressed int
}

// New starts cfg.Concurrency workers. With no Exec it starts none
// and Send is a no-op.
func New(cfg Config, log *slog.Logger) *Alerter {
	if log == nil {
		log = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.RateLimit == 0 {
		cfg.RateLimit = DefaultRateLimit
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	a := &Alerter{
		cfg:     cfg,
		log:     log.With("subsystem", "alert"),
		rate:    make(map[alertKey]*rateState),
		quiet:   make(map[string]bool, len(cfg.Quiet)),
		urgentN: make(map[alertKey]int),
		wake:    make(chan struct{}, cfg.Concurrency), // one per worker that may wait
	}
	for _, e := range cfg.Quiet {
		a.quiet[e] = true
	}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	if len(cfg.Exec) == 0 {
		a.closed = true
		return a
	}
	a.queue = make(chan Alert, cfg.Queue)
	for range cfg.Concurrency {
		a.workers.Add(1)
		go a.worker()
	}
	return a
}

// Send queues al for the alert command and returns at once. A zero Time
// is set to now. An error-level alert always waits for its turn (urgent.go).
// Other alerts over the rate limit are counted, not queued; when the queue
// is full the alert is dropped, counted, and the first drop of a burst is
// logged.
func (a *Alerter) Send(al Alert) {
	if a == nil {
		return
	}
	if al.Time.IsZero() {
		al.Time = time.Now()
	}
	key := alertKey{ownerKey(al.Store), al.Event} // a stat: before the lock
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	if isUrgent(al) {
		a.pushUrgentLocked(al, key)
		return
	}
	rs := a.rate[key]
	if rs == nil {
		rs = &rateState{}
		a.rate[key] = rs
	}
	if a.cfg.RateLimit > 0 && !rs.last.IsZero() && al.Time.Sub(rs.last) < a.cfg.RateLimit {
		rs.suppressed++
		a.suppressed.Add(1)
		a.count("suppressed")
		return
	}
	n := rs.suppressed
	if n > 0 {
		// Copy: the caller may reuse its map.
		f := make(map[string]any, len(al.Fields)+1)
		for k, v := range al.Fields {
			f[k] = v
		}
		f["suppressed"] = n
		al.Fields = f
	}
	select {
	case a.queue <- al:
		rs.last, rs.suppressed = al.Time, 0
		if a.dropBurst > 0 {
			a.log.Info("alert queue has room again", "event", EventAlertDropped, "dropped", a.dropBurst)
			a.dropBurst = 0
		}
	default:
		// The window still starts here so a flood stays held back; what
		// this one carried is owed to the next alert of the key.
		rs.last, rs.suppressed = al.Time, n+1
		a.dropped.Add(1)
		a.count("dropped")
		if a.dropBurst == 0 {
			a.log.Warn("alert queue full, dropping alerts until it drains",
				"event", EventAlertDropped, "alert_event", al.Event, "store", al.Store,
				"queue", cap(a.queue), "hint", "the alert command is slow or hanging: check alert.exec and alert.timeout")
		}
		a.dropBurst++
	}
}

// Stats returns the counters.
func (a *Alerter) Stats() AlertStats {
	if a == nil {
		return AlertStats{}
	}
	return AlertStats{
		Sent: a.sent.Load(), Failed: a.failed.Load(),
		Dropped: a.dropped.Load(), Suppressed: a.suppressed.Load(), Coalesced: a.coalesced.Load(),
	}
}

// Close stops taking alerts and waits for the queued ones to be delivered.
// When ctx ends first it kills the running commands, drops what is still
// queued, and returns ctx's error.
func (a *Alerter) Close(ctx context.Context) error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.queue)
	}
	a.mu.Unlock()
	done := make(chan struct{})
	go func() { a.workers.Wait(); close(done) }()
	select {
	case <-done:
		a.cancel()
		return nil
	case <-ctx.Done():
		a.cancel()
		<-done // workers return promptly once their commands are killed
		return fmt.Errorf("close alerter: %w (queued alerts dropped)", ctx.Err())
	}
}

// worker runs the urgent alerts first, then the queue's; once the queue
// is closed it runs what is left of the urgent ones and returns.
func (a *Alerter) worker() {
	defer a.workers.Done()
	for {
		if al, ok := a.popUrgent(); ok {
			a.deliver(al)
			continue
		}
		select {
		case al, ok := <-a.queue:
			if !ok {
				for al, ok := a.popUrgent(); ok; al, ok = a.popUrgent() {
					a.deliver(al)
				}
				return
			}
			a.deliver(al)
		case <-a.wake:
		}
	}
}

// deliver runs the command for al, or counts it dropped once Close gave up.
func (a *Alerter) deliver(al Alert) {
	if a.ctx.Err() != nil {
		a.dropped.Add(1)
		a.count("dropped")
		return
	}
	a.run(al)
}

// run executes the command once for al, in its own process group so a
// timeout kills whatever it started too.
func (a *Alerter) run(al Alert) {
	doc, err := json.Marshal(al)
	if err != nil {
		a.fail(al, 0, fmt.Errorf("encode alert: %w", err), nil)
		return
	}
	doc = append(doc, '\n')
	ctx, cancel := context.WithTimeout(a.ctx, a.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.cfg.Exec[0], a.cfg.Exec[1:]...)
	cmd.Stdin = bytes.NewReader(doc)
	out := &tailBuffer{max: alertOutputTail}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(),
		"STATEGUARD_EVENT="+al.Event, "STATEGUARD_STORE="+al.Store, "STATEGUARD_LEVEL="+al.Level.String())
	setProcessGroup(cmd)
	cmd.Cancel = func() error { return killProcessGroup(cmd) }
	// A grandchild that keeps our pipes open must not hold Wait forever.
	cmd.WaitDelay = time.Second
	start := time.Now()
	a.running.Add(1)
	err = cmd.Run()
	a.running.Add(-1)
	if err != nil {
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			err = fmt.Errorf("killed after the %v timeout: %w", a.cfg.Timeout, err)
		case a.ctx.Err() != nil:
			err = fmt.Errorf("killed at shutdown: %w", err)
		}
		a.fail(al, time.Since(start), err, out.Bytes())
		return
	}
	a.sent.Add(1)
	a.count("sent")
}

func (a *Alerter) fail(al Alert, d time.Duration, err error, output []byte) {
	a.failed.Add(1)
	a.count("failed")
	attrs := []any{"event", EventAlertFailed, "alert_event", al.Event, "store", al.Store,
		"command", a.cfg.Exec[0], "duration", d, "err", err,
		"hint", "run the alert.exec command by hand with a JSON event on stdin"}
	if len(output) > 0 {
		attrs = append(attrs, "output", string(output))
	}
	a.log.Error("alert command failed", attrs...)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.b)
}
