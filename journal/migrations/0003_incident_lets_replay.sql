-- Whether an incident still holds back its store's replay jobs is the
-- incident engine's decision, journaled with each of its steps, not a list
-- of states the journal keeps: 0 (the default, the safe one) holds them
-- back, 1 lets them run. Incidents journaled before keep the rule they were
-- written under: only diverted, replaying and finished ones let replay run.
ALTER TABLE incidents ADD COLUMN lets_replay INTEGER NOT NULL DEFAULT 0;
UPDATE incidents SET lets_replay = 1
	WHERE state IN ('diverted', 'replaying', 'resolved', 'failed', 'unrecoverable');
