// Package store owns everything about a session store as files and as a
// database: Hermes homes and profiles, store paths, generation identity
// ((dev, ino) of main, -wal and -shm plus the WAL header), read-only opens,
// the schema probe, and reading and appending messages the way Hermes does.
//
// It knows nothing of processes.
package store
