package supervisor

import (
	"sync"
	"sync/atomic"
)

// countedMutex is the Agent's lock over its set of workers. It counts its
// acquisitions so a test can check that the agent's own bookkeeping grows
// linearly with the number of stores (issue 16: startup used to take the
// lock and read every worker's guard once per new worker).
type countedMutex struct {
	sync.Mutex
	n atomic.Int64
}

func (m *countedMutex) Lock() {
	m.n.Add(1)
	m.Mutex.Lock()
}

// workCounters count the agent's shared work that must stay linear in
// the number of stores; read by tests only.
type workCounters struct {
	guardReads atomic.Int64 // guardState calls (a guard's status read)
	stated     atomic.Int64 // stores whose paths the full scans read (coverage.go)
	rebuilt    atomic.Int64 // stores whose results the full scans built, not reused
	// pendingStated counts the pending stores reconciles looked at.
	pendingStated atomic.Int64
}

// workCount is a snapshot of the counters.
type workCount struct {
	AgentLocks int64 // acquisitions of the Agent's lock
	GuardReads int64
	Stated     int64
	Rebuilt    int64
	Pending    int64 // pending stores looked at
}

func (a *Agent) workCount() workCount {
	return workCount{AgentLocks: a.mu.n.Load(), GuardReads: a.work.guardReads.Load(), Stated: a.work.stated.Load(), Rebuilt: a.work.rebuilt.Load(), Pending: a.work.pendingStated.Load()}
}
