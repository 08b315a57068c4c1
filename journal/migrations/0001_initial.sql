-- stateguard journal, schema version 1.
-- Every timestamp is INTEGER unix nanoseconds (UTC); NULL means "not yet".
-- Every *detail/result column is a JSON object.
-- States and kinds are validated in Go (journal_state.go), not with CHECK
-- constraints, so adding one never needs a table rebuild.

CREATE TABLE schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
) STRICT;

CREATE TABLE incidents (
	id          TEXT    PRIMARY KEY,
	store       TEXT    NOT NULL,
	profile     TEXT    NOT NULL DEFAULT '',
	home        TEXT    NOT NULL DEFAULT '',
	kind        TEXT    NOT NULL,
	state       TEXT    NOT NULL,
	prev_state  TEXT    NOT NULL DEFAULT '',
	policy      TEXT    NOT NULL DEFAULT '',
	opened_at   INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL,
	resolved_at INTEGER,
	detail      TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(detail))
) STRICT;

CREATE INDEX incidents_by_store ON incidents (store, opened_at);
CREATE INDEX incidents_unfinished ON incidents (state)
	WHERE state NOT IN ('resolved', 'failed');

-- One row per step, appended in the transaction that changes the incident.
-- from_state/to_state are set when the step is a state transition.
CREATE TABLE incident_steps (
	incident_id TEXT    NOT NULL REFERENCES incidents (id),
	seq         INTEGER NOT NULL,
	name        TEXT    NOT NULL,
	at          INTEGER NOT NULL,
	from_state  TEXT    NOT NULL DEFAULT '',
	to_state    TEXT    NOT NULL DEFAULT '',
	detail      TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(detail)),
	PRIMARY KEY (incident_id, seq)
) STRICT, WITHOUT ROWID;

-- AUTOINCREMENT so a job id is never reused: operators quote them.
CREATE TABLE replay_jobs (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	incident_id     TEXT    REFERENCES incidents (id),
	store           TEXT    NOT NULL,
	jsonl_path      TEXT    NOT NULL,
	session_id      TEXT    NOT NULL DEFAULT '',
	state           TEXT    NOT NULL,
	attempts        INTEGER NOT NULL DEFAULT 0,
	next_attempt_at INTEGER NOT NULL,
	last_error      TEXT    NOT NULL DEFAULT '',
	created_at      INTEGER NOT NULL,
	updated_at      INTEGER NOT NULL,
	result          TEXT    CHECK (result IS NULL OR json_valid(result))
) STRICT;

CREATE INDEX replay_jobs_runnable ON replay_jobs (state, next_attempt_at);
CREATE INDEX replay_jobs_by_store ON replay_jobs (store, state);
CREATE INDEX replay_jobs_by_incident ON replay_jobs (incident_id);

-- History of guard maintenance pauses. A pause is active while ended_at
-- is NULL and until is in the future; it expires by itself.
CREATE TABLE guard_pauses (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	store      TEXT    NOT NULL,
	until      INTEGER NOT NULL,
	reason     TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	ended_at   INTEGER
) STRICT;

CREATE INDEX guard_pauses_by_store ON guard_pauses (store, ended_at);
