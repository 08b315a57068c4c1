// Package watcher turns fsnotify directory watches and a reconcile ticker
// into typed, debounced events per store. It watches directories, never the
// store files themselves, so a rename-over or an unlink is always seen, and
// it falls back to a full reconcile whenever the kernel queue overflows.
//
// It knows nothing of processes or SQL.
//
// The caller describes what to watch with Set (targets: a store's
// directory and the names in it that make its generation; homes: a Hermes
// root, its profiles/ and profiles/.deleted/) and reads Events:
//
//   - StoreChanged for a Create, Remove, Rename or Chmod of a target's
//     name, or for its directory going away or coming back (Ops has Dir).
//     Writes are dropped before anything else: -wal is written on every
//     commit and a write never changes a generation's identity.
//   - HomeChanged when a profile or tombstone appears or goes, or
//     state.db appears in a home root.
//   - Reconcile on the ticker, on Watcher.Reconcile, on a kernel queue
//     overflow or fsnotify error, and when the consumer fell behind.
//   - WatchError for a directory that exists but cannot be watched.
//
// Debouncing is per key and leading-edge: the first event is delivered at
// once (detection latency is what matters), what follows within the window
// is folded into one trailing event. The Events channel is buffered; the
// watcher never waits on it: when it is full, events are folded into one
// owed Reconcile, delivered when there is room.
//
// A directory that disappears is unwatched and reported; it is watched again
// when its parent reports it back or at the next reconcile, and the event
// saying so is sent only after the watch is in place, so a consumer that
// stats on receipt misses nothing.
//
// On macOS fsnotify uses kqueue, which opens every file of a watched
// directory (O_EVTONLY) and closes them as they go. Closing any fd of a file
// drops the process's POSIX locks on it, so an agent holding SQLite
// connections or locks on a store must not rely on them surviving there.
package watcher
