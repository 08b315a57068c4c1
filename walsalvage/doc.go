// Package walsalvage recovers rows from the page images in a SQLite -wal
// file alone, for an orphaned WAL that has no main file it can be paired
// with (the main was rewritten in place, or is gone).
//
// It walks the frames from the header as SQLite's WAL recovery does
// (salts, checksum chain, stop at the first invalid frame), keeps the
// newest image of each page up to the last commit frame, and decodes the
// table b-tree leaf pages of Hermes' messages and sessions tables, with
// overflow chains followed when their pages are in the WAL too. Which
// leaf page belongs to which table is decided from the records' shape
// (field count and storage classes of the key columns) against every
// column list it can find: the schema in the WAL's own page 1, a supplied
// main file's schema, and the known Hermes layouts. Root page numbers are
// never trusted: the main they would come from may be another database
// by now.
//
// Beyond a restarted header it also reads the previous generation's
// committed frames (WAL.Previous), laid under the WAL's own: after a
// checkpoint they may be the last copy of rows whose main was overwritten.
// docs/design.md says what of them is verified.
//
// Nothing is invented: a row whose overflow pages are not in the WAL, a
// cell that does not decode and a page that fits no table are counted in
// the Report with the reason, never guessed at.
//
// The package only reads the bytes it is given; it opens no files and
// runs no SQLite.
package walsalvage
