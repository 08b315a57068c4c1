// Package holders finds every process that holds an inode of a watched
// store, current or orphaned, and acts on those processes: freeze, thaw and
// signal through a pidfd, pin orphaned inodes, and hold the guard's OFD
// locks.
//
// A scan that cannot see every process that could open a store says so: its
// verdict is Unknown, never Clear. Platform code lives in scan_linux.go,
// scan_darwin.go and scan_other.go behind one shared result type; gopsutil
// supplies process metadata only.
//
// It knows nothing of SQL.
package holders
