// Package watcher turns fsnotify directory watches and a reconcile ticker
// into typed, debounced events per store. It watches directories, never the
// store files themselves, so a rename-over or an unlink is always seen, and
// it falls back to a full reconcile whenever the kernel queue overflows.
//
// It knows nothing of processes or SQL.
package watcher
