// Package supervisor runs the incident protocol: one serialized worker per
// store, a durable journal in the agent's own SQLite database, the replay
// queue, release policies, alerts and the control API served to agentctl.
//
// It holds no platform details; those live in holders and store.
package supervisor
