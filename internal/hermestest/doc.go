// Package hermestest builds real Hermes-shaped stores for tests and
// benchmarks: the Hermes schema with its FTS5 external-content tables and
// triggers, and a helper that builds and spawns the test writer program
// (./writer), a live WAL-mode writer that acknowledges each committed
// message in an ack file.
//
// It also holds what every package's real-process tests share: waiting
// with a deadline (Eventually, Writer.WaitAcks, Writer.AcksGrow), a
// process's state (ProcState), a backup and a restore (VacuumInto,
// RenameFreshOver), the surroundings of an agent run in a test (AgentEnv,
// TestLogger, LogBuffer, RunWithOFDLocks for a TestMain), and an alert
// command that records what it receives (NewAlertRecorder, Runs). It
// imports nothing of stateguard, so any package's own tests can use it.
package hermestest
