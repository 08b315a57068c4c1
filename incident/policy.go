package incident

import (
	"fmt"
	"time"

	"github.com/stateguard/stateguard/journal"
)

// Policy is how an incident's frozen orphan holders are released
// (docs/design.md §7, step 5).
type Policy string

const (
	// PolicyTerminate: SIGTERM, SIGCONT, grace, then SIGKILL.
	PolicyTerminate Policy = "terminate"
	// PolicyKill: SIGKILL while stopped, so no close-time code runs.
	PolicyKill Policy = "kill"
	// PolicyResume: SIGCONT only, for writers with their own guard.
	PolicyResume Policy = "resume"
	// PolicyHold: stay frozen until `agentctl release`.
	PolicyHold Policy = "hold"
	// PolicyObserve: never signal; alert, pin and capture only.
	PolicyObserve Policy = "observe"
)

// Policies lists every policy.
var Policies = []Policy{PolicyTerminate, PolicyKill, PolicyResume, PolicyHold, PolicyObserve}

// UnmarshalText accepts a policy name, so config files can hold one.
func (p *Policy) UnmarshalText(b []byte) error {
	for _, v := range Policies {
		if string(b) == string(v) {
			*p = v
			return nil
		}
	}
	return fmt.Errorf("%q is not a policy (one of terminate, kill, resume, hold, observe)", b)
}

// PolicySet is the release policy per incident kind, plus the terminate
// grace period.
type PolicySet struct {
	Replaced    Policy
	SidecarLost Policy
	Mispaired   Policy
	// Rewritten: the writers of a main rewritten in place; their page
	// caches are stale, so kill by default.
	Rewritten Policy
	Grace     time.Duration
	// FrozenLimit bounds how long an incident in needs_action keeps its
	// holders frozen (a capture that cannot be written before release);
	// past it they are resumed, with an error event (frozen_limit.go).
	FrozenLimit time.Duration
}

// DefaultGrace is the terminate grace period when none is set.
const DefaultGrace = 30 * time.Second

// DefaultFrozenLimit is how long needs_action keeps holders frozen when
// no limit is set: long enough for an operator paged by incident.opened
// to free disk space or release by hand, short enough that nobody's
// process stays stopped for good because a capture cannot be written.
const DefaultFrozenLimit = 10 * time.Minute

// DefaultPolicies are docs/design.md's defaults, the only place they are
// defined: the config loader fills unset entries from them and For and
// GraceOrDefault fall back to them.
func DefaultPolicies() PolicySet {
	return PolicySet{Replaced: PolicyTerminate, SidecarLost: PolicyKill, Mispaired: PolicyKill, Rewritten: PolicyKill, Grace: DefaultGrace, FrozenLimit: DefaultFrozenLimit}
}

// For returns the policy for kind k; unset entries fall back to the
// defaults.
func (s PolicySet) For(k journal.Kind) Policy {
	d := DefaultPolicies()
	pick := func(p, def Policy) Policy {
		if p == "" {
			return def
		}
		return p
	}
	switch k {
	case journal.KindReplaced:
		return pick(s.Replaced, d.Replaced)
	case journal.KindSidecarLost:
		return pick(s.SidecarLost, d.SidecarLost)
	case journal.KindRewritten:
		return pick(s.Rewritten, d.Rewritten)
	default:
		return pick(s.Mispaired, d.Mispaired)
	}
}

// FrozenLimitOrDefault returns the frozen limit, default 10 minutes.
func (s PolicySet) FrozenLimitOrDefault() time.Duration {
	if s.FrozenLimit <= 0 {
		return DefaultFrozenLimit
	}
	return s.FrozenLimit
}

// GraceOrDefault returns the terminate grace period, default 30 s.
func (s PolicySet) GraceOrDefault() time.Duration {
	if s.Grace <= 0 {
		return DefaultGrace
	}
	return s.Grace
}
