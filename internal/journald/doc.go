// Package journald is a log/slog handler that writes each record to the
// systemd journal over its native protocol, one field per attribute, so
// `journalctl EVENT=incident.opened` or `journalctl STORE=/home/a/.hermes/state.db`
// finds agentd's events; and the check systemd documents for whether a
// process's stderr is already connected to the journal ($JOURNAL_STREAM).
//
// The protocol (systemd.io/JOURNAL_NATIVE_PROTOCOL): one datagram to
// /run/systemd/journal/socket holding NAME=value lines, a value with a
// newline in it as NAME, a newline, its length as a little-endian uint64,
// the bytes and a newline. An entry too big for a datagram goes into a
// sealed memfd whose descriptor is sent instead.
package journald
