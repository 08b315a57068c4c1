package supervisor

import (
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/watcher"
)

// The agent's options: what Start is given, the defaults it fills in,
// and the part a SIGHUP reload swaps while the agent runs.

// Options configure an Agent. The zero value runs with the defaults on the
// stores discovered for the running user.
type Options struct {
	StateDir string // default DefaultStateDir
	// Socket is the control socket's path; default
	// <DefaultRuntimeDir>/agent.sock; "-" serves no socket.
	Socket string
	// Reconcile is the holder re-scan interval (default 10 s): each
	// re-reads the stores no event covers (coverage.go).
	Reconcile time.Duration
	// DisableNotify turns fsnotify off (the polling baseline).
	DisableNotify bool
	Discover      store.DiscoverOptions
	Policies      incident.PolicySet
	// StorePolicies overrides Policies per store path.
	StorePolicies map[string]incident.PolicySet
	// Exclude lists executable base names that are never signalled.
	Exclude []string
	// CaptureMaxBytes is the per-capture budget; 0 means free space only.
	CaptureMaxBytes int64
	Logger          *slog.Logger
	// Metrics is updated as the agent works (nil: none); MetricsListen
	// serves it on a loopback address ("" = no endpoint).
	Metrics       *Metrics
	MetricsListen string
	// Stall watches Hermes stores for hung gateways and stalled turns
	// (nil: off).
	Stall *StallWatch
	// Guard arms the prevention guard on Hermes stores in WAL mode
	// (agentd's config default is guard = true); StoreGuard overrides it
	// per store path, and is the only way to guard a generic store.
	Guard      bool
	StoreGuard map[string]bool
	// Verdict is the holder scan's rule for processes it cannot inspect
	// (holders.RuleLocks when empty); status, restore and incidents all
	// judge by it.
	Verdict holders.Rule
	// Hooks are the incident engine's test seams (nil: none).
	Hooks incident.Hooks
	// NoOpenGate catches in-place rewrites at their first write only,
	// not at their open (fanotify permission events): what the agent does
	// where the kernel has none; for measuring the difference.
	NoOpenGate bool
	// Keeper keeps copies of incidents' pins in the service manager's
	// file descriptor store (nil: pins live as long as the agent).
	Keeper *PinKeeper
	// OpenFileLimit is the open-file limit the guards' budget is taken
	// from (0: the process's RLIMIT_NOFILE; fdlimit.go). For tests.
	OpenFileLimit int
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.StateDir == "" {
		o.StateDir = control.DefaultStateDir(os.Getenv, os.Geteuid())
	}
	if o.Socket == "" {
		o.Socket = filepath.Join(control.DefaultRuntimeDir(os.Getenv, os.Geteuid()), control.SocketFile)
	}
	if o.Reconcile <= 0 {
		o.Reconcile = watcher.DefaultReconcile
	}
	return o
}

// Reload applies the options a SIGHUP may change: policies, exclusions,
// the capture budget, the guard and the verdict rule. Paths, the socket
// and discovery stay as started.
func (a *Agent) Reload(o Options) {
	a.live.Store(reloadOf(o))
	a.cache.SetRule(o.Verdict)
	a.log.Info("configuration reloaded")
}

// reloadable are the options Reload replaces.
type reloadable struct {
	policies        incident.PolicySet
	storePolicies   map[string]incident.PolicySet
	exclude         []string
	captureMaxBytes int64
	guard           bool
	storeGuard      map[string]bool
}

func reloadOf(o Options) *reloadable {
	return &reloadable{policies: o.Policies, storePolicies: o.StorePolicies, exclude: o.Exclude,
		captureMaxBytes: o.CaptureMaxBytes, guard: o.Guard, storeGuard: o.StoreGuard}
}

// policies returns the policy set for a store.
func (a *Agent) policies(path string) incident.PolicySet {
	r := a.live.Load()
	if p, ok := r.storePolicies[path]; ok {
		return p
	}
	return r.policies
}

func (a *Agent) captureBudget() int64 { return a.live.Load().captureMaxBytes }

func (a *Agent) excluded(p *holders.Process) bool {
	if p.Pid == os.Getpid() {
		return true
	}
	base := filepath.Base(p.Exe)
	for _, e := range a.live.Load().exclude {
		if e == base {
			return true
		}
	}
	return false
}
