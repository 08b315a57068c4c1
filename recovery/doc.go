// Package recovery salvages and moves rows between stores: captures of
// orphaned generations, the divert of rows that exist only in a capture to
// Hermes-format JSONL, the exactly-once replay (Hermes recovery ids), safe
// restore, lineage adoption and export.
//
// It knows nothing of fsnotify or signals.
package recovery
