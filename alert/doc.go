// Package alert runs the operator's alert command (alert.exec) once per
// event: an Alerter queues alerts, runs the command with a bounded
// concurrency, a timeout that kills its process group, and a rate limit
// per (owner, event), the owner being the uid of the store's directory,
// and never blocks its caller, so the incident path can alert from inside
// its freeze deadline. Error-level alerts are never rate-limited or
// dropped, only coalesced under a flood (urgent.go).
//
// Handler tees a slog handler into an Alerter: every record with an
// "event" attribute at info or above is alerted, whatever the log level,
// so `log.level = "warn"` quiets the log without quieting the pager.
// Events named in Config.Quiet are logged but never alerted.
//
// The package knows no event names but its own (alert.failed,
// alert.dropped) and depends on nothing of stateguard; the metrics are
// reached through the Counter interface.
package alert
