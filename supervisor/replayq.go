package supervisor

import "time"

// replayLoop runs queued replay jobs once their store has no incident
// that blocks replay. It polls the journal: jobs are rare and a poll
// survives restarts for free.
func (a *Agent) replayLoop() {
	defer a.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
			a.runReplayJobs()
		}
	}
}

// runReplayJobs is filled in by the recovery integration.
func (a *Agent) runReplayJobs() {}
