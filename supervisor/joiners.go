package supervisor

import (
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
)

// engineProcs is what the incident engine may do to the host's
// processes: incident.Host's signals, and the one stop the engine starts
// itself, of a writer that opened a mispaired or rewritten store's old
// sidecars with the new main before their quarantine
// (incident.JoinerFreezer). The engine owns that process from before the
// signal, so no stop ledger claims it.
type engineProcs struct {
	incident.Host
	w *worker
}

// Spares is true for a process the configuration excludes and for the
// restore's own process (agentctl restore): never stopped.
func (p engineProcs) Spares(h holders.Process) bool {
	return p.w.a.excluded(&h) || p.w.restorer(h.Ref())
}

func (engineProcs) FreezeJoiner(ref holders.ProcRef) error { return holders.Freeze(ref) }
