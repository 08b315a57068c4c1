package main

import (
	"log/slog"
	"os"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/service"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/supervisor"
)

// agentOptions turns the config into the supervisor's options.
func agentOptions(c *service.Config, log *slog.Logger) supervisor.Options {
	o := supervisor.Options{
		StateDir:        c.StateDir,
		Socket:          c.Socket,
		Reconcile:       c.Reconcile.D,
		Policies:        c.Policy.Set(),
		StorePolicies:   map[string]incident.PolicySet{},
		Exclude:         c.Exclude,
		CaptureMaxBytes: int64(c.Capture.MaxBytes),
		Logger:          log,
		Discover:        store.DiscoverOptions{ExtraHomes: c.Homes, MaxProfiles: c.MaxProfilesPerHome},
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
		o.StorePolicies[s.Path] = s.Policy.Set()
		if s.Guard != nil {
			o.StoreGuard[s.Path] = *s.Guard
		}
	}
	return o
}
