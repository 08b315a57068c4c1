// Package control is agentd's control protocol, everything a client
// needs without the daemon: where the state directory and the control
// socket are (DefaultStateDir, DefaultRuntimeDir, PrepareStateDir), the
// routes with their request and answer types, and the status document
// (Status, BuildStatus) that `agentctl status` prints whether it asked the
// daemon or scanned by itself.
//
// Package supervisor serves these routes; agentctl speaks them and imports
// control, journal (read-only) and the libraries, never supervisor.
package control
