package main

import (
	"context"
	"errors"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/journal"
)

// queueWithDaemon asks a running agentd to queue the replay, so it runs
// on the store's worker once no incident blocks the store. No daemon →
// queued=false and the caller replays in this process (env.queueReplay).
func queueWithDaemon(ctx context.Context, e *env, req replayRequest) (bool, error) {
	c := newClient(socketPath("", e.getenv))
	var job journal.Job
	err := c.post(ctx, "/v1/jobs", control.JobRequest{Path: req.Path, Store: req.Store, SessionID: req.SessionID}, &job)
	if errors.Is(err, errDaemonNotRunning) {
		return false, nil
	}
	return err == nil, err
}
