// Package modwatch reports writes into watched files together with the
// pid of the process that wrote, so the agent can tell a store's own
// SQLite connections from a process that rewrites its main in place (cp,
// rsync --inplace, dd, cat >) at that process's first write.
//
// On Linux it is fanotify (FAN_MODIFY and FAN_CLOSE_WRITE on inode
// marks), which names writers only with CAP_SYS_ADMIN: agentd running as
// root gets it. A mark follows the inode, not the name, so a main renamed
// aside is still watched until Unwatch. Without the privilege New uses
// inotify on the watched files instead (IN_MODIFY, IN_CLOSE_WRITE; a
// watch follows the inode too), and events carry Pid 0 (Attributed is
// false). Elsewhere New returns ErrUnsupported and the agent falls back
// to what directory events and holder scans show (docs/design.md §5).
//
// Where the kernel has permission events, a second group holds each
// write-only or truncating open(2) of a watched file by another process
// until the callback has run (OpenWrite), so the agent acts before the
// opener can write; it always allows, after GateTimeout at the latest.
//
// It knows nothing of stores or processes: an event is an inode, a pid
// and what happened.
package modwatch
