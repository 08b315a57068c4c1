// Package supervisor is the agent: it discovers the stores, watches their
// directories (package watcher), scans their holders (package holders),
// and runs one worker per store that detects orphaned generations,
// freezes their writers from the holder cache, keeps the prevention guard
// armed and checkpoints idle guarded stores. Each worker hands what it
// detects to its store's incident engine (package incident) and wakes it.
// Around the workers: the replay queue that runs the engine's jobs, the
// stall watch, restore announcements, metrics, and the control API served
// to agentctl on a unix socket (its types and routes are package
// control's, so agentctl never imports this package).
//
// The durable record is package journal's; what happens to files and
// rows is recovery's and store's. It holds no platform details; those
// live in holders and store. It builds on Linux and macOS, the product's
// targets, and nowhere else: the holder scan, the freeze, the pins and the
// guard need their kernels' process and lock APIs, so there are no stubs
// for other systems (GOOS=windows fails in holders and recovery first).
package supervisor
