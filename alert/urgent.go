package alert

import (
	"log/slog"
	"path/filepath"
	"strconv"
	"syscall"
)

// Who an alert is about, and the alerts that must arrive.
//
// The rate limit is per owner, not per store: a user who creates profiles
// in a loop makes a new store per profile, and with a window per store
// each one's first alert went through, filled the queue, and got every
// other alert dropped, another user's incident.opened included. The
// owner is the uid of the store's directory (the profile directory);
// a store whose directory cannot be read is limited on its own path, an
// alert of no store on its own.
//
// An alert at error level (incident.opened, capture.failed, ...) is
// never rate-limited and never dropped: it waits in the urgent list,
// which the workers serve before the queue. Under a flood the urgent
// list keeps at most urgentPerKey alerts of one (owner, event); one more
// is coalesced into the last of them (fields.coalesced counts them,
// fields.stores names up to coalescedStores of their stores), so what it
// holds is bounded by the users and events there are, and one user's
// flood waits behind another's alert, never ahead of all of them.

const (
	urgentPerKey    = 8
	coalescedStores = 16
)

// ownerKey is the rate limit's and the urgent list's notion of who an
// alert is about.
func ownerKey(store string) string {
	if store == "" {
		return ""
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Dir(store), &st); err != nil {
		return "store:" + store
	}
	return "uid:" + strconv.FormatUint(uint64(st.Uid), 10)
}

// urgent is one alert of the urgent list, with what was coalesced into it.
type urgent struct {
	al        Alert
	key       alertKey
	coalesced int
	stores    []string
}

// pushUrgentLocked adds an error-level alert to the urgent list and
// wakes a worker. a.mu is held.
func (a *Alerter) pushUrgentLocked(al Alert, key alertKey) {
	if a.urgentN[key] >= urgentPerKey {
		for i := len(a.urgent) - 1; i >= 0; i-- {
			if u := a.urgent[i]; u.key == key {
				u.coalesced++
				if len(u.stores) < coalescedStores && al.Store != "" {
					u.stores = append(u.stores, al.Store)
				}
				a.coalesced.Add(1)
				break
			}
		}
	} else {
		a.urgent = append(a.urgent, &urgent{al: al, key: key})
		a.urgentN[key]++
	}
	select {
	case a.wake <- struct{}{}:
	default: // every worker has a wake pending already
	}
}

// popUrgent takes the oldest urgent alert, with what was coalesced into
// it in its fields.
func (a *Alerter) popUrgent() (Alert, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.urgent) == 0 {
		return Alert{}, false
	}
	u := a.urgent[0]
	a.urgent[0] = nil
	a.urgent = a.urgent[1:]
	if a.urgentN[u.key]--; a.urgentN[u.key] <= 0 {
		delete(a.urgentN, u.key)
	}
	if u.coalesced == 0 {
		return u.al, true
	}
	f := make(map[string]any, len(u.al.Fields)+2)
	for k, v := range u.al.Fields {
		f[k] = v
	}
	f["coalesced"], f["stores"] = u.coalesced, u.stores
	u.al.Fields = f
	return u.al, true
}

// isUrgent: error-level alerts are the ones that must arrive.
func isUrgent(al Alert) bool { return al.Level >= slog.LevelError }
