package supervisor

import (
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
)

// Series every scrape shows from the start, at 0, so rate(), increase()
// and absent() in the alert rules behave before the first incident.

// incidentKinds are the kinds incidents_opened_total and
// incidents_finished_total start with.
var incidentKinds = []journal.Kind{journal.KindReplaced, journal.KindSidecarLost, journal.KindMispaired, journal.KindRewritten}

// GuardIdle is guard_stores' state for a store whose guard is wanted but
// has nothing to hold yet: no -shm (no connection has the store open), or
// no main file.
const GuardIdle = "idle"

// GuardStates are guard_stores' states.
var GuardStates = []string{control.GuardArmed, control.GuardPaused, control.GuardOff, GuardIdle, control.GuardUnavailable}

func (m *Metrics) initIncidentSeries() {
	for _, k := range incidentKinds {
		m.incidentsOpened.WithLabelValues(string(k))
		for _, st := range journal.States() {
			if !st.Terminal() {
				m.incidentsOpen.WithLabelValues(string(k), string(st))
			}
		}
		for _, st := range journal.States() {
			if st.Terminal() {
				m.incidentsDone.WithLabelValues(string(k), string(st))
			}
		}
	}
}

// initHolderSeries starts stateguard_holders with every role, current and
// orphan.
func (m *Metrics) initHolderSeries() {
	for _, r := range []holders.Role{holders.RoleMain, holders.RoleWAL, holders.RoleSHM} {
		for _, orphan := range []bool{false, true} {
			m.holderSeriesSeen[HolderKey{Role: string(r), Orphan: orphan}] = true
		}
	}
	m.sumHoldersLocked()
}

// GuardStoreMove moves one store in guard_stores from one state to
// another ("" for none: a store's first state).
func (m *Metrics) GuardStoreMove(from, to string) {
	if m == nil {
		return
	}
	if from != "" {
		m.guardStores.WithLabelValues(from).Dec()
	}
	if to != "" {
		m.guardStores.WithLabelValues(to).Inc()
	}
}

// ReconcileInterval records the configured reconcile interval.
func (m *Metrics) ReconcileInterval(d time.Duration) {
	if m != nil {
		m.reconcileEvery.Set(d.Seconds())
	}
}

// BuildInfo sets build_info to 1 with the build's labels (version,
// revision, goversion, sqlite).
func (m *Metrics) BuildInfo(labels map[string]string) {
	if m != nil {
		m.buildInfo.Reset()
		m.buildInfo.With(labels).Set(1)
	}
}
