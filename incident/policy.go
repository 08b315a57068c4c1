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
}

// DefaultGrace is the terminate grace period when none is set.
const DefaultGrace = 30 * time.Second

// DefaultPolicies are docs/design.md's defaults, the only place they are
// defined: the config loader fills unset entries from them and For and
// GraceOrDefault fall back to them.
func DefaultPolicies() PolicySet {
	return PolicySet{Replaced: PolicyTerminate, SidecarLost: PolicyKill, Mispaired: PolicyKill, Rewritten: PolicyKill, Grace: DefaultGrace}
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

// GraceOrDefault returns the terminate grace period, default 30 s.
func (s PolicySet) GraceOrDefault() time.Duration {
	if s.Grace <= 0 {
		return DefaultGrace
	}
	return s.Grace
}
