-- Where each store's live WAL stood at the agent's last check and at its
-- shutdown: an incident found at the next start (a restore done while no
-- agent ran) cuts its replay at this frame instead of at a time. One row
-- per store, rewritten only when the position moved.
CREATE TABLE wal_positions (
	store        TEXT    PRIMARY KEY,
	main_dev     INTEGER NOT NULL,
	main_ino     INTEGER NOT NULL,
	main_size    INTEGER NOT NULL,
	main_counter INTEGER NOT NULL,
	main_page1   INTEGER NOT NULL, -- FNV-1a of the main's page 1
	wal_dev      INTEGER NOT NULL,
	wal_ino      INTEGER NOT NULL,
	salt1        INTEGER NOT NULL,
	salt2        INTEGER NOT NULL,
	frame        INTEGER NOT NULL,
	backfilled   INTEGER NOT NULL,
	at           INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
