package service

import (
	"log/slog"
	"os"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/supervisor"
)

// AgentOptions turns the config into the supervisor's options.
func (c *Config) AgentOptions(log *slog.Logger) supervisor.Options {
	o := supervisor.Options{
		StateDir:        c.StateDir,
		Socket:          c.Socket,
		Reconcile:       c.Reconcile.D,
		Policies:        c.Policy.set(),
		StorePolicies:   map[string]incident.PolicySet{},
		Exclude:         c.Exclude,
		CaptureMaxBytes: int64(c.Capture.MaxBytes),
		Logger:          log,
		Discover:        store.DiscoverOptions{ExtraHomes: c.Homes},
		Guard:           c.Guard == nil || *c.Guard,
		Verdict:         c.Verdict,
		StoreGuard:      map[string]bool{},
	}
	if c.DiscoverUsers != nil && !*c.DiscoverUsers {
		o.Discover.CurrentUserOnly = true
	} else if os.Geteuid() == 0 {
		o.Discover.AllUsers = true
	}
	for _, s := range c.Stores {
		o.Discover.ExtraStores = append(o.Discover.ExtraStores, s.Path)
		o.StorePolicies[s.Path] = s.Policy.set()
		if s.Guard != nil {
			o.StoreGuard[s.Path] = *s.Guard
		}
	}
	return o
}

func (p PolicyConfig) set() incident.PolicySet {
	return incident.PolicySet{Replaced: p.Replaced, SidecarLost: p.SidecarLost, Mispaired: p.Mispaired, Grace: p.Grace.D}
}
