package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/stateguard/stateguard/alert"
	"github.com/stateguard/stateguard/store"
)

// Event names of the stall watch. They belong with the others in
// events.go; they live here until the owner of that file moves them.
const (
	EventStallDetected = "stall.detected"
	EventStallCleared  = "stall.cleared"
)

// StallCheckInterval is how often a store's stall check is worth running:
// heartbeats and last_activity_at move on that scale, and each check opens
// the store.
const StallCheckInterval = time.Minute

// Stall kinds.
const (
	StallGateway = "gateway" // a live gateway process whose heartbeat stopped
	StallSession = "session" // a leased turn with no heartbeat or message
)

// Reasons a stall cleared.
const (
	ClearedMoved    = "moved"        // the heartbeat or activity moved again
	ClearedExited   = "pid_exited"   // the hung gateway's process is gone
	ClearedReleased = "released"     // the lease expired or was released
	ClearedRemoved  = "row_removed"  // the heartbeat row is gone
	ClearedDisabled = "not_watching" // the watch was turned off or the store forgotten
)

// StallConfig configures a StallWatch.
type StallConfig struct {
	// Timeout is how long a heartbeat or a leased session may stand still;
	// 0 (or negative) disables the watch.
	Timeout time.Duration
	// PIDAlive reports whether a process exists on this host; nil means
	// signal 0.
	PIDAlive func(pid int) bool
	// Hostname is this host's name as gateways record it; empty means
	// os.Hostname().
	Hostname string
	// Metrics, if set, tracks stalls open.
	Metrics *Metrics
}

// StallEvent is one stall starting (EventStallDetected) or ending
// (EventStallCleared).
type StallEvent struct {
	Event string // EventStallDetected or EventStallCleared
	Store string
	Kind  string // StallGateway or StallSession
	// Key is the gateway's backend_id or the session's conversation_id.
	Key  string
	PID  int    // the gateway's, or the lease holder's; 0 if unknown
	Host string // the gateway's host column
	// LastMoved is the newest of the signals that should have moved:
	// heartbeat for a gateway; heartbeat, lease acquisition, newest
	// message and last_activity_at for a session.
	LastMoved time.Time
	// Age is how long nothing had moved when the event was raised.
	Age    time.Duration
	Reason string // for EventStallCleared, one of the Cleared* reasons
}

// Alert turns e into an alert: WARN when detected, INFO when cleared.
func (e StallEvent) Alert(now time.Time) alert.Alert {
	lvl := slog.LevelWarn
	if e.Event == EventStallCleared {
		lvl = slog.LevelInfo
	}
	return alert.Alert{Event: e.Event, Level: lvl, Store: e.Store, Time: now, Fields: e.Fields()}
}

// Fields are e's details as log attributes or alert fields.
func (e StallEvent) Fields() map[string]any {
	f := map[string]any{"kind": e.Kind, "key": e.Key, "age": e.Age.Round(time.Second)}
	if e.PID > 0 {
		f["pid"] = e.PID
	}
	if e.Host != "" {
		f["host"] = e.Host
	}
	if !e.LastMoved.IsZero() {
		f["last_moved"] = e.LastMoved.UTC().Format(time.RFC3339Nano)
	}
	if e.Reason != "" {
		f["reason"] = e.Reason
	}
	return f
}

// StallWatch reads Hermes liveness tables read-only and reports each stall
// once when it starts and once when it ends. Safe for concurrent use by
// several stores' workers; a zero StallWatch is disabled.
type StallWatch struct {
	cfg      StallConfig
	hostname string

	mu     sync.Mutex
	stores map[string]*stallStore
}

type stallStore struct {
	lastCheck time.Time
	open      map[stallKey]StallEvent // the detected event of each open stall
}

type stallKey struct{ kind, key string }

// NewStallWatch returns a watch; with cfg.Timeout <= 0 every Check is a
// no-op.
func NewStallWatch(cfg StallConfig) *StallWatch {
	w := &StallWatch{cfg: cfg, hostname: cfg.Hostname}
	if w.hostname == "" {
		w.hostname, _ = os.Hostname()
	}
	return w
}

// Enabled reports whether the watch checks anything.
func (w *StallWatch) Enabled() bool { return w != nil && w.cfg.Timeout > 0 }

// Due reports whether StallCheckInterval has passed since storePath's last
// Check, so a store's worker can ask on every wakeup.
func (w *StallWatch) Due(storePath string, now time.Time) bool {
	if w == nil || w.cfg.Timeout <= 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stores[storePath]
	return s == nil || now.Sub(s.lastCheck) >= StallCheckInterval
}

// Check reads the store once, read-only (through its directory's handle), and returns the stalls that
// started and ended since the last Check of that store. On error nothing
// is cleared: a read that failed has not seen the stall end.
func (w *StallWatch) Check(ctx context.Context, st store.Store, now time.Time) ([]StallEvent, error) {
	if w == nil || w.cfg.Timeout <= 0 {
		return nil, nil
	}
	storePath := st.Path
	obs, err := w.read(ctx, st, now)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stores == nil {
		w.stores = make(map[string]*stallStore)
	}
	s := w.stores[storePath]
	if s == nil {
		s = &stallStore{open: make(map[stallKey]StallEvent)}
		w.stores[storePath] = s
	}
	s.lastCheck = now
	var events []StallEvent
	for k, o := range obs.stalled {
		if _, ok := s.open[k]; ok {
			continue
		}
		o.Event = EventStallDetected
		s.open[k] = o
		events = append(events, o)
	}
	for k, was := range s.open {
		if _, ok := obs.stalled[k]; ok {
			continue
		}
		delete(s.open, k)
		c := was
		c.Event = EventStallCleared
		c.Reason = obs.why[k]
		if c.Reason == "" {
			c.Reason = ClearedRemoved
		}
		if lm, ok := obs.moved[k]; ok {
			c.LastMoved = lm
		}
		c.Age = now.Sub(was.LastMoved)
		events = append(events, c)
	}
	sortStallEvents(events)
	w.cfg.Metrics.StallState(countDelta(events))
	return events, nil
}

// Forget drops a removed store, returning a cleared event for each stall
// it had open.
func (w *StallWatch) Forget(storePath string, now time.Time) []StallEvent {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stores[storePath]
	delete(w.stores, storePath)
	if s == nil {
		return nil
	}
	var events []StallEvent
	for _, was := range s.open {
		c := was
		c.Event, c.Reason, c.Age = EventStallCleared, ClearedDisabled, now.Sub(was.LastMoved)
		events = append(events, c)
	}
	sortStallEvents(events)
	w.cfg.Metrics.StallState(countDelta(events))
	return events
}

func countDelta(events []StallEvent) int {
	d := 0
	for _, e := range events {
		if e.Event == EventStallDetected {
			d++
		} else {
			d--
		}
	}
	return d
}

func sortStallEvents(ev []StallEvent) {
	sort.Slice(ev, func(i, j int) bool {
		if ev[i].Event != ev[j].Event {
			return ev[i].Event > ev[j].Event // detected before cleared
		}
		if ev[i].Kind != ev[j].Kind {
			return ev[i].Kind < ev[j].Kind
		}
		return ev[i].Key < ev[j].Key
	})
}

// stallObservation is one read of a store: what is stalled now, and for
// everything seen that is not, why not and when it last moved.
type stallObservation struct {
	stalled map[stallKey]StallEvent
	why     map[stallKey]string
	moved   map[stallKey]time.Time
}

func (w *StallWatch) read(ctx context.Context, st store.Store, now time.Time) (stallObservation, error) {
	storePath := st.Path
	obs := stallObservation{
		stalled: make(map[stallKey]StallEvent),
		why:     make(map[stallKey]string),
		moved:   make(map[stallKey]time.Time),
	}
	// Through the directory's handle, as its owner: root's connection
	// would read what the owner may not.
	var lv store.Liveness
	err := store.AsOwner(ownerOf(st.DirID), ownerGroup(st.DirID), func() (err error) {
		lv, err = st.ReadLiveness(ctx)
		return err
	})
	if err != nil {
		return obs, fmt.Errorf("stall check: %w", err)
	}
	w.gatewayStalls(storePath, lv.Gateways, now, obs)
	w.sessionStalls(storePath, lv.Gateways, lv.Leases, now, obs)
	return obs, nil
}

// gatewayStalls: a gateway is hung when its heartbeat is older than the
// timeout while its process is alive. The pid means something only on
// this host, so rows from other hosts are never called hung.
func (w *StallWatch) gatewayStalls(storePath string, gateways []store.Gateway, now time.Time, obs stallObservation) {
	for _, g := range gateways {
		k := stallKey{StallGateway, g.BackendID}
		obs.moved[k] = g.Heartbeat
		switch {
		case g.Heartbeat.IsZero():
			obs.why[k] = ClearedRemoved // no heartbeat to judge by
		case now.Sub(g.Heartbeat) < w.cfg.Timeout:
			obs.why[k] = ClearedMoved
		case g.PID == 0 || (g.Host != "" && g.Host != w.hostname):
			obs.why[k] = ClearedExited // cannot be judged alive from here
		case !w.pidAlive(g.PID):
			obs.why[k] = ClearedExited
		default:
			obs.stalled[k] = StallEvent{Store: storePath, Kind: StallGateway, Key: g.BackendID,
				PID: g.PID, Host: g.Host, LastMoved: g.Heartbeat, Age: now.Sub(g.Heartbeat)}
		}
	}
}

// sessionStalls: a session is stalled when its turn lease is unexpired and
// neither the holder's heartbeat, nor the lease's acquisition, nor the
// session's newest message or last_activity_at moved for the timeout.
func (w *StallWatch) sessionStalls(storePath string, gateways []store.Gateway, leases []store.TurnLease, now time.Time, obs stallObservation) {
	heartbeatOf := make(map[int]time.Time)
	for _, g := range gateways {
		if g.PID > 0 && g.Heartbeat.After(heartbeatOf[g.PID]) {
			heartbeatOf[g.PID] = g.Heartbeat
		}
	}
	for _, l := range leases {
		k := stallKey{StallSession, l.ConversationID}
		pid := store.HolderPID(l.Holder)
		moved := latest(latest(l.AcquiredAt, l.LastActivity), l.NewestMessage)
		if pid > 0 {
			moved = latest(moved, heartbeatOf[pid])
		}
		obs.moved[k] = moved
		switch {
		case !l.ExpiresAt.After(now):
			obs.why[k] = ClearedReleased
		case moved.IsZero():
			obs.why[k] = ClearedRemoved // nothing to judge by
		case now.Sub(moved) < w.cfg.Timeout:
			obs.why[k] = ClearedMoved
		default:
			obs.stalled[k] = StallEvent{Store: storePath, Kind: StallSession, Key: l.ConversationID,
				PID: pid, LastMoved: moved, Age: now.Sub(moved)}
		}
	}
}

func (w *StallWatch) pidAlive(pid int) bool {
	if w.cfg.PIDAlive != nil {
		return w.cfg.PIDAlive(pid)
	}
	return processAlive(pid)
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
