// Package store owns everything about a session store as files and as a
// database: Hermes homes and profiles, store paths, generation identity
// ((dev, ino) of main, -wal and -shm plus the WAL header), read-only opens,
// the schema probe, and reading and appending messages the way Hermes does.
//
// It knows nothing of processes.
//
// Discovery (DiscoverHomes, Profiles, Discover) only lstats and lists
// directories. ReadGeneration and ProbeFile open raw fds on a store's
// inodes and close them again; close(2) drops every POSIX lock the process
// holds on that inode, so neither may run while the same process holds a
// POSIX-locking SQLite connection on that store.
package store
