// Package hermestest builds real Hermes-shaped stores for tests and
// benchmarks: the Hermes schema with its FTS5 external-content tables and
// triggers, and a helper that builds and spawns the test writer program
// (./writer), a live WAL-mode writer that acknowledges each committed
// message in an ack file.
package hermestest
