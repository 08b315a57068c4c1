// Package sdnotify is the client side of systemd's notify protocol
// (sd_notify(3)): one datagram of newline-separated VARIABLE=value
// assignments sent to the unix socket named by $NOTIFY_SOCKET, a path or,
// with a leading '@', an abstract socket. It also reads the watchdog
// interval systemd hands the service ($WATCHDOG_USEC, $WATCHDOG_PID).
//
// It is the protocol, nothing more: when agentd is ready, what its status
// line says and when a keepalive may be sent is decided by cmd/agentd.
// Outside systemd (no $NOTIFY_SOCKET) every call does nothing.
package sdnotify
