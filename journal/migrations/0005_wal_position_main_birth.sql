-- The journaled main's birth time (statx btime, ns; 0 where the
-- filesystem keeps none). A main renamed aside while no agent ran is
-- still held by its writers under a name that is no role of the store;
-- the next agent looks for that inode by number, and the birth is what
-- tells it from an unrelated file that got the number since.
ALTER TABLE wal_positions ADD COLUMN main_birth INTEGER NOT NULL DEFAULT 0;
